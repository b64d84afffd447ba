/* whale-bench: measure Whale's building blocks where they run (under srun
 * --whale-... or whale-run). Subcommands: comm, calib, offload. */
#include <stdio.h>
#include <string.h>

#include "bench_calib.h"
#include "bench_comm.h"
#include "bench_offload.h"
#include "whale_config.h"

static void usage(FILE *f)
{
    fprintf(f, "Usage: whale-bench SUBCOMMAND [options]\n"
               "\n"
               "Subcommands:\n"
               "  comm   collective bandwidth and latency (nccl-tests columns)\n"
               "  calib  measure GEMM and link speed, write a whale-plan --calib profile\n"
               "  offload  host AdamW speed; bandwidth of each offload path (memcpy, RMA)\n"
               "\n"
               "  whale-bench SUBCOMMAND --help   options of a subcommand\n"
               "  -h, --help      show this help\n"
               "  -V, --version   show the version\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "-V") || !strcmp(argv[1], "--version")) {
        printf("whale-bench %s\n", WHALE_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "comm"))
        return bench_comm_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "calib"))
        return bench_calib_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "offload"))
        return bench_offload_main(argc - 1, argv + 1);
    fprintf(stderr, "whale-bench: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
