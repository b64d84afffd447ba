#ifndef WHALE_BENCH_CALIB_H
#define WHALE_BENCH_CALIB_H
/* `whale-bench calib -o FILE`: measure this machine for the planner. */
int bench_calib_main(int argc, char **argv);
#endif
