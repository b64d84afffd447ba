/* Walking srun's own options in its argv, shared by the checks that run in
 * slurm_spank_init before srun has parsed anything (elastic.c, mpi.c).
 * srun's options come before the command; a bare word is the command
 * unless it is the value of the option before it ("-N 4", "--nodes 4"). */
#ifndef WHALE_SPANK_SRUN_ARGV_H
#define WHALE_SPANK_SRUN_ARGV_H

#include <stdbool.h>
#include <string.h>

enum srun_arg {
    SRUN_ARG_END,    /* "--" or the command: srun's options are over */
    SRUN_ARG_VALUE,  /* the value of the option before it */
    SRUN_ARG_OPTION, /* an option */
};

/* Classify word a; *prev_takes_value carries over from the word before
 * (start with false). For an option it is set to whether the option may
 * take the next word as its value ("-N" or "--nodes", not "--nodes=4");
 * a caller that consumes that value itself clears it. */
static inline enum srun_arg srun_arg_kind(const char *a, bool *prev_takes_value)
{
    if (!strcmp(a, "--"))
        return SRUN_ARG_END;
    if (a[0] != '-') {
        if (!*prev_takes_value)
            return SRUN_ARG_END;
        *prev_takes_value = false;
        return SRUN_ARG_VALUE;
    }
    *prev_takes_value = (a[1] != '-' && a[2] == '\0') || (a[1] == '-' && !strchr(a, '='));
    return SRUN_ARG_OPTION;
}

#endif
