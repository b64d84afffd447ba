/* whale.conf (site config: srun and slurmstepd parse it). */
#include "fuzz_common.h"
#include "whale/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    char *s = fuzz_cstr(data, size);
    struct whale_conf *c = NULL;
    if (whale_conf_parse_string(s, "fuzz.conf", &c) == 0) {
        char *t = whale_conf_topology_path(c, NULL);
        free(t);
        whale_conf_free(c);
    }
    free(s);
    return 0;
}
