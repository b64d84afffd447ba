/* Model description files (--model FILE, --whale-model FILE). */
#include "fuzz_common.h"
#include "whale/modeldesc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    char *s = fuzz_cstr(data, size);
    struct whale_model_desc m;
    if (whale_model_desc_parse_string(s, "fuzz.conf", &m) == 0 &&
        whale_model_desc_params(&m) <= 0)
        abort(); /* an accepted model has a positive, non-overflowed count */
    free(s);
    return 0;
}
