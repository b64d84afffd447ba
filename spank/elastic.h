/* Whale steps with hot spares in Slurm's eyes (elastic.c: srun and
 * sbatch/salloc settings; report.c: the failure reports of a running step
 * in slurmstepd). Facts and choices: spank/ELASTIC.md. */
#ifndef SPANK_WHALE_ELASTIC_H
#define SPANK_WHALE_ELASTIC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct whale_step;

/* Set by sbatch/salloc in the job's environment when the allocation has
 * --no-kill (slurmctld tells nobody a job's kill_on_node_fail). */
#define WHALE_ENV_JOB_NO_KILL "WHALE_JOB_NO_KILL"
/* srun -> slurmstepd: PORT:TOKEN of srun's result channel (result.c). A
 * SLURM_* name: srun keeps it in the launch environment even with
 * --export=NONE. */
#define WHALE_SPANK_RESULT_ENV "SLURM_WHALE_RESULT"

/* slurm_spank_init of srun, sbatch and salloc: when --whale-spares=N > 0
 * is on the command line (or inherited from sbatch), export what makes
 * the step (srun) or the job (sbatch/salloc) survive a failure. */
void whale_elastic_preset(void);
/* srun init_post_opt / local_user_init: 0, or -1 after a message naming
 * the option to change. */
int whale_elastic_check_srun(int spares);
/* sbatch/salloc init_post_opt, for every job (whale: any --whale* given). */
int whale_elastic_allocator(bool whale, int spares);

/* Pure helpers (unit-tested): spares asked for on a command line (argv of
 * srun/sbatch/salloc, before the user's command) or in the inherited
 * option variable; the first option that contradicts a step with spares
 * (-K/--kill-on-bad-exit other than 0, -W/--wait other than 0,
 * --no-kill=off), "" when none. */
int whale_elastic_spares_arg(char *const *argv, int argc, const char *env_value);
void whale_elastic_argv_conflict(char *const *argv, int argc, char *out, size_t n);

/* slurmstepd: the report FIFO. open (user_init) creates it and a thread
 * that reads one line per failure, "NODE KIND RANK TASK" (KIND: crash,
 * node, link, hang), from the step's tasks: it drains NODE in slurmctld
 * (with the reason) and SIGKILLs TASK when it is a task of this node that
 * is still there (a hung rank must not outlive the step). */
int whale_report_open(const char *dir, unsigned job, unsigned stepid, uid_t uid, gid_t gid,
                      const struct whale_step *s);
const char *whale_report_path(void);
/* the step's name of this node (default: the host name) */
void whale_report_this_node(const char *name);
/* a task of this node started (pid) or ended (0) */
void whale_report_task_pid(int gid, pid_t pid);
void whale_report_close(void);

/* Parse and check one report line against the step's nodes and tasks.
 * 0 and the fields, or -1 with the reason in why. */
struct whale_report {
    char node[64];
    char kind[8];
    int rank, task;
};
int whale_report_parse(const char *line, const struct whale_step *s, struct whale_report *r,
                       char *why, size_t n);

/* Whether a (parsed) report is believable and what slurmstepd may do for
 * it (report_judge.c; the threat model is in spank/ELASTIC.md). this_node:
 * the report names the node of this slurmstepd; seen: what slurmstepd
 * knows of that task; node_answers: another node's slurmd accepted a TCP
 * connection (1), refused or never answered (0), unknown (-1). Returns
 * WHALE_REPORT_* flags, 0 with the reason in why when nothing is done. */
enum whale_task_seen {
    WHALE_TASK_UNKNOWN,  /* never started here */
    WHALE_TASK_RUNNING,
    WHALE_TASK_STOPPED,  /* state T: stopped or traced */
    WHALE_TASK_GONE,     /* slurmstepd saw it exit; another node: no process
                            of the step is left there */
};
#define WHALE_REPORT_DRAIN 1u
#define WHALE_REPORT_KILL 2u
unsigned whale_report_judge(const struct whale_report *r, bool this_node,
                            enum whale_task_seen seen, int node_answers, char *why, size_t n);

/* srun's exit status for a step with spares (result.c): srun collects the
 * task statuses and the reported failures from the slurmstepds, and at its
 * exit leaves out the replaced tasks. */
int whale_result_listen(int ntasks);           /* srun local_user_init */
void whale_result_exit(void);                  /* srun slurm_spank_exit: may _exit() */
void whale_result_target(const char *comm_host, const char *value); /* slurmstepd */
void whale_result_task_exit(int task, int status);
void whale_result_task_failed(int task);
/* Pure parts (unit-tested): one received line into the tables; the status
 * Slurm's rule gives without the failed tasks (-1: none failed, or a
 * status is missing). */
void whale_result_record(const char *line, int ntasks, int *status, bool *failed,
                         const char *token);
int whale_result_status(int ntasks, const int *status, const bool *failed);

#endif
