/* Plan JSON (--whale-plan files, WHALE_PLAN, SLURM_WHALE_PLAN). */
#include "fuzz_common.h"
#include "whale/planfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    char *s = fuzz_cstr(data, size);
    struct whale_plan p;
    if (whale_plan_from_json(s, "fuzz", &p) == 0) {
        whale_plan_validate(&p, 0, 0, "fuzz");
        whale_plan_validate(&p, 8, 24, "fuzz");
        char *j = whale_plan_to_json(&p, 0);
        struct whale_plan q;
        /* what we write we must read back */
        if (j && whale_plan_from_json(j, "roundtrip", &q) != 0)
            abort();
        if (j)
            whale_plan_free(&q);
        free(j);
        whale_plan_free(&p);
    }
    free(s);
    return 0;
}
