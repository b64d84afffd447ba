/* Calibration profiles (whale-plan --calib, written by whale-bench calib). */
#include "fuzz_common.h"
#include "whale/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_quiet();
    char *s = fuzz_cstr(data, size);
    struct whale_calib c;
    whale_calib_parse_string(s, "fuzz.calib", &c);
    free(s);
    return 0;
}
