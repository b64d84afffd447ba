/* whale-ckpt subcommands implemented outside main.c. */
#ifndef WHALE_CKPT_TOOL_H
#define WHALE_CKPT_TOOL_H

/* Synthetic checkpoint benchmark; prints figures (RESULT key=value lines). */
/* part: NULL (all), "stall", "incremental" or "compression". */
int ckpt_tool_bench(const char *dir, double mb, int repeat, double compute_ms, const char *part);

/* convert --from-safetensors: checked against model (preset or .conf), or
 * unchecked when model is NULL (--any-names). Exit status 0 or 1. */
int ckpt_tool_import(const char *in, const char *root, long long step, const char *model);
/* import / export --hf (hf_cmd.c); argv[1] is the command. */
int ckpt_tool_hf(int argc, char **argv);

#endif
