/* The Slurm side of the plugin's unit tests (see slurm_stubs.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "slurm_stubs.h"

char last_err[4096];
struct spank_option reg[64];
int nreg;

void slurm_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_err, sizeof last_err, fmt, ap);
    va_end(ap);
}
void slurm_info(const char *fmt, ...) { (void)fmt; }
void slurm_verbose(const char *fmt, ...) { (void)fmt; }
void slurm_debug(const char *fmt, ...) { (void)fmt; }
void slurm_spank_log(const char *fmt, ...) { (void)fmt; }
const char *spank_strerror(spank_err_t e) { (void)e; return "stub"; }
spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
    (void)sp;
    reg[nreg++] = *opt;
    return ESPANK_SUCCESS;
}

void stub_options_reset(void)
{
    memset(&whale_opts, 0, sizeof whale_opts);
    whale_opts.tp = whale_opts.pp = 1;
    last_err[0] = '\0';
    nreg = 0;
    whale_plugin_log_init();
    assert_int_equal(whale_options_register(NULL), 0);
}

int stub_opt(const char *name, const char *arg, int remote)
{
    for (int i = 0; i < nreg; i++)
        if (!strcmp(reg[i].name, name))
            return reg[i].cb(reg[i].val, arg, remote);
    fail_msg("option %s not registered", name);
    return -99;
}
