#ifndef WHALE_BENCH_COMM_H
#define WHALE_BENCH_COMM_H
/* `whale-bench comm ...`: collective bandwidth/latency in nccl-tests form. */
int bench_comm_main(int argc, char **argv);
void bench_comm_usage(void *stream);
#endif
