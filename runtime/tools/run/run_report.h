/* whale-run: the failure report channel an elastic step's survivors write
 * to (WHALE_REPORT, whale/report.h), as slurmstepd offers it under srun
 * (run_report.c). */
#ifndef WHALE_RUN_REPORT_H
#define WHALE_RUN_REPORT_H

#include <stdbool.h>

struct run_report {
    char dir[64];   /* private directory (mkdtemp), "" when off */
    char path[96];  /* the FIFO in it */
    int fd;         /* read end (O_RDWR: never end-of-file), -1 when off */
    char buf[512];
    int have;
};

/* Create the FIFO and export WHALE_REPORT for the tasks; 0, or -1 with
 * a warning on stderr (the run goes on; replaced tasks then count in the
 * exit status). */
int run_report_open(struct run_report *r);
/* Read what is there; for each well-formed line "NODE KIND RANK TASK"
 * with 0 <= TASK < ntasks set replaced[TASK]. Returns how many lines
 * were taken. */
int run_report_poll(struct run_report *r, int ntasks, bool *replaced);
/* Parse one line; 0 and *task, or -1. */
int run_report_parse(const char *line, int ntasks, int *task);
void run_report_close(struct run_report *r);

#endif
