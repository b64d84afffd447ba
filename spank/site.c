/* Plugstack arguments and the site configuration. The config is read only
 * when a step uses Whale, so a broken whale.conf never affects other jobs. */
#include "plugin.h"
#include "whale/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct whale_site whale_site = { .conf_path = WHALE_CONF_DEFAULT_PATH,
                                 .rankmap_inline_max = 64 * 1024 };

static void log_sink(int level, const char *line, void *user)
{
    (void)user;
    switch (level) {
    case WHALE_LOG_ERROR:
        slurm_error(PLUGIN_NAME ": %s", line);
        break;
    case WHALE_LOG_WARN:
        slurm_info(PLUGIN_NAME ": warning: %s", line);
        break;
    case WHALE_LOG_INFO:
        slurm_verbose(PLUGIN_NAME ": %s", line);
        break;
    default:
        slurm_debug(PLUGIN_NAME ": %s", line);
        break;
    }
}

void whale_plugin_log_init(void)
{
    whale_log_set_sink(log_sink, NULL);
    /* debug lines go to Slurm's debug level; Slurm filters them */
    whale_log_set_level(WHALE_LOG_DEBUG);
}

int whale_site_parse_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        if (!strncmp(av[i], "conf=", 5)) {
            if (!av[i][5] || strlen(av[i] + 5) >= sizeof whale_site.conf_path) {
                slurm_error(PLUGIN_NAME ": plugstack.conf: bad conf= argument '%s'", av[i]);
                return -1;
            }
            snprintf(whale_site.conf_path, sizeof whale_site.conf_path, "%s", av[i] + 5);
        } else if (!strncmp(av[i], "rankmap_inline_max=", 19)) {
            char *end;
            long v = strtol(av[i] + 19, &end, 10);
            /* one environment string is limited to 128 KiB by Linux */
            if (end == av[i] + 19 || *end || v < 0 || v > 120 * 1024) {
                slurm_error(PLUGIN_NAME ": plugstack.conf: %s: expected 0..122880 bytes", av[i]);
                return -1;
            }
            whale_site.rankmap_inline_max = v;
        } else {
            slurm_error(PLUGIN_NAME ": plugstack.conf: unknown argument '%s' (known: conf=PATH, "
                        "rankmap_inline_max=BYTES)", av[i]);
            return -1;
        }
    }
    return 0;
}

int whale_site_load(void)
{
    if (whale_site.conf)
        return 0;
    struct whale_conf *c = NULL;
    if (access(whale_site.conf_path, R_OK) != 0) {
        slurm_error(PLUGIN_NAME ": cannot read the site config %s: %s (plugstack.conf conf=)",
                    whale_site.conf_path, strerror(errno));
        return -1;
    }
    if (whale_conf_load(whale_site.conf_path, &c))
        return -1; /* the parser logged file:line */
    whale_site.used_path = whale_site.conf_path;
    if (whale_opts.given[OPT_CONF] && strcmp(whale_opts.conf, whale_site.conf_path)) {
        if (!c->allow_user_config) {
            slurm_error(PLUGIN_NAME ": --whale-conf is not allowed on this site (AllowUserConfig=yes "
                        "in %s enables it)", whale_site.conf_path);
            whale_conf_free(c);
            return -1;
        }
        whale_conf_free(c);
        c = NULL;
        if (access(whale_opts.conf, R_OK) != 0) {
            slurm_error(PLUGIN_NAME ": --whale-conf=%s: %s", whale_opts.conf, strerror(errno));
            return -1;
        }
        if (whale_conf_load(whale_opts.conf, &c))
            return -1;
        whale_site.used_path = whale_opts.conf;
    }
    whale_site.conf = c;
    return 0;
}

void whale_site_free(void)
{
    whale_conf_free(whale_site.conf);
    whale_site.conf = NULL;
}
