/* Rank maps (WHALE_RANKMAP inline or @file) and the PMIx/Slurm layout
 * strings the plugin decodes in slurmstepd. */
#include "fuzz_common.h"
#include "whale/map.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    char *s = fuzz_cstr(data, size);
    int *v = NULL, n = 0;
    /* maps up to 2^24 ranks are legal; the round trip is checked on the
     * small ones so that one large input does not take seconds */
    if (whale_rankmap_decode(s, &v, &n) == 0 && n > (1 << 16)) {
        free(v);
    } else if (n > 0) {
        char *e = whale_rankmap_encode(v, n);
        int *w = NULL, m = 0;
        /* the encoding of a decoded map decodes to the same map */
        if (!e || whale_rankmap_decode(e, &w, &m) || m != n || memcmp(v, w, sizeof(int) * (size_t)n))
            abort();
        free(w);
        free(e);
        free(v);
    }
    int ntasks[4];
    if (whale_map_parse_tasks_per_node(s, 4, ntasks) == 0) {
        int *ids = NULL;
        if (whale_map_parse_pmi_mapping(s, 4, ntasks, &ids) == 0)
            free(ids);
    }
    free(s);
    return 0;
}
