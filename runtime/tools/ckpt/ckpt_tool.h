/* whale-ckpt subcommands implemented outside main.c. */
#ifndef WHALE_CKPT_TOOL_H
#define WHALE_CKPT_TOOL_H

/* Synthetic checkpoint benchmark; prints figures (RESULT key=value lines). */
/* part: NULL (all), "stall", "incremental" or "compression". */
int ckpt_tool_bench(const char *dir, double mb, int repeat, double compute_ms, const char *part);

#endif
