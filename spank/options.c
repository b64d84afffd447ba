/* Option table. Callbacks may run twice with the same value (srun, then
 * replayed remotely), so they only record state. */
#include "plugin.h"

#include <stddef.h>

struct whale_opts whale_opts;

static int opt_whale(int val, const char *optarg, int remote)
{
    (void)val;
    (void)optarg;
    (void)remote;
    whale_opts.enabled = true;
    return 0;
}

static struct spank_option options[] = {
    { "whale", NULL, "Run this step with Whale (hybrid-parallel training layout).", 0, 0,
      (spank_opt_cb_f)opt_whale },
    SPANK_OPTIONS_TABLE_END
};

int whale_options_register(spank_t sp)
{
    for (struct spank_option *o = options; o->name; o++) {
        spank_err_t e = spank_option_register(sp, o);
        if (e != ESPANK_SUCCESS) {
            slurm_error(PLUGIN_NAME ": cannot register --%s: %s", o->name, spank_strerror(e));
            return -1;
        }
    }
    return 0;
}
