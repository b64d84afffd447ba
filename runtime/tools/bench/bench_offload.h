/* whale-bench offload: host AdamW speed and the bandwidth of each offload
 * path (memcpy, local RMA handle, RMA to another task). */
#ifndef WHALE_BENCH_OFFLOAD_H
#define WHALE_BENCH_OFFLOAD_H
int bench_offload_main(int argc, char **argv);
#endif
