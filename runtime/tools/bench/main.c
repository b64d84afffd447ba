/* whale-bench: measure Whale's building blocks where they run (under srun
 * --whale-... or whale-run). Subcommands: comm, calib, offload. */
#define _GNU_SOURCE
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_calib.h"
#include "bench_comm.h"
#include "bench_offload.h"
#include "whale/blascore.h"
#include "whale/knobs.h"
#include "whale_config.h"

/* OpenBLAS picks its kernels when it loads; on a CPU model it does not know
 * it falls back to SSE3 ones (whale/blascore.h), and calib would measure
 * (and the planner assume) a fraction of the CPU's GEMM rate. Re-exec once
 * with OPENBLAS_CORETYPE set, as whale-train does. */
static void ensure_blas_core(char **argv)
{
    const char *core = whale_knob_getenv("WHALE_BENCH_REEXEC") ? NULL : whale_blas_core_wanted();
    if (!core)
        return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    setenv("WHALE_BENCH_REEXEC", "1", 1); /* tells the re-exec'd child not to re-exec */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        execv(self, argv);
    }
    /* exec failed: carry on with OpenBLAS's own choice */
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: whale-bench SUBCOMMAND [options]\n"
               "\n"
               "Subcommands:\n"
               "  comm   collective bandwidth and latency (nccl-tests columns)\n"
               "  calib  measure GEMM and link speed, write a whale-plan --calib profile\n"
               "  offload  host AdamW speed; bandwidth of each offload path (memcpy, RMA)\n"
               "  blas   the OpenBLAS kernels in use (after WHALE_BLAS_CORE's choice) and the\n"
               "         CPU's vector flags: give a peer (PyTorch) the same OPENBLAS_CORETYPE\n"
               "\n"
               "  whale-bench SUBCOMMAND --help   options of a subcommand\n"
               "  -h, --help      show this help\n"
               "  -V, --version   show the version\n");
}

int main(int argc, char **argv)
{
    ensure_blas_core(argv);
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
    if (!strcmp(argv[1], "blas")) {
        unsigned f = whale_cpu_features();
        printf("core %s\nfeatures%s%s%s%s\n", whale_blas_corename(),
               f & WHALE_CPU_AVX ? " avx" : "", f & WHALE_CPU_AVX2 ? " avx2+fma" : "",
               f & WHALE_CPU_AVX512 ? " avx512" : "", f & WHALE_CPU_AVX512BF16 ? " avx512bf16" : "");
        return 0;
    }
    fprintf(stderr, "whale-bench: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
