/* Slurm's topology.conf (switch tree, NVLink blocks). */
#include "fuzz_common.h"
#include "whale/conf.h"
#include "whale/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    char *s = fuzz_cstr(data, size);
    struct whale_topo *t = whale_topo_new();
    if (!t)
        abort();
    whale_topology_conf_parse_string(s, "topology.conf", t);
    whale_topo_free(t);
    free(s);
    return 0;
}
