/* GPU types of the step's nodes from Slurm (srun, before the planner):
 * whale.conf's DeviceTypeFromFeature= / DeviceTypeFromGres= map a node's
 * features or gpu GRES type to a GPU type, for the nodes no NodeName line
 * types. One slurm_load_node() from srun, only when a mapping exists and a
 * node needs it; never from slurmstepd (every node would ask slurmctld).
 * What slurmctld returns is bounded and parsed by the conf module. */
#include "plugin.h"
#include "step.h"
#include "whale/conf.h"
#include "whale/plan.h"
#include "whale/topo.h"

#include <slurm/slurm.h>
#include <string.h>
#include <strings.h>

/* A GPUType line of whale.conf, or a device of the planner's catalogue
 * (whose names it matches exactly or by prefix, as the planner does). */
static bool type_known(const struct whale_topo *t, const char *type)
{
    if (whale_topo_find_gpu_type(t, type) >= 0)
        return true;
    int n;
    const struct whale_plan_device *cat = whale_plan_devices(&n);
    for (int i = 0; i < n; i++)
        if (!strncasecmp(cat[i].name, type, strlen(type)))
            return true;
    return false;
}

int whale_step_types_from_slurm(const struct whale_conf *c, const struct whale_step *s)
{
    if (!c || !s->topo || (!c->nfeature_types && !c->ngres_types))
        return 0;
    bool need = false;
    for (int i = 0; i < s->nnodes && !need; i++) {
        int k = whale_topo_find_node(s->topo, s->nodes[i]);
        need = k >= 0 && s->topo->nodes[k].gpu_type < 0;
    }
    if (!need)
        return 0;
    node_info_msg_t *msg = NULL;
    if (slurm_load_node((time_t)0, &msg, SHOW_ALL) != SLURM_SUCCESS || !msg) {
        /* the plan is still made, on the types whale.conf gives */
        slurm_info(PLUGIN_NAME ": warning: cannot read the nodes' features and GRES from "
                   "slurmctld (%s): DeviceTypeFromFeature/DeviceTypeFromGres of %s not applied",
                   slurm_strerror(slurm_get_errno()), whale_site.used_path);
        return 0;
    }
    int rv = 0;
    for (int i = 0; i < s->nnodes && !rv; i++) {
        int k = whale_topo_find_node(s->topo, s->nodes[i]);
        if (k < 0 || s->topo->nodes[k].gpu_type >= 0)
            continue;
        for (uint32_t r = 0; r < msg->record_count; r++) {
            const node_info_t *n = &msg->node_array[r];
            if (!n->name || strcmp(n->name, s->nodes[i]))
                continue;
            const char *feat = n->features_act && *n->features_act ? n->features_act
                                                                   : n->features;
            int gpus = 0, line = 0;
            const char *type = whale_conf_device_type(c, feat, n->gres, &gpus, &line);
            if (!type)
                break;
            if (!type_known(s->topo, type)) {
                slurm_error(PLUGIN_NAME ": %s:%d: node %s maps to GPU type %s, which is neither "
                            "a GPUType line nor a device the planner knows (A100-80GB, "
                            "H100-80GB, ...)", whale_site.used_path, line, s->nodes[i], type);
                rv = -1;
                break;
            }
            /* without a GRES count, one device per task on the node */
            int rc = whale_conf_topo_set_device(s->topo, k, type, gpus > 0 ? gpus : s->ntasks[i]);
            if (rc < 0) {
                slurm_error(PLUGIN_NAME ": %s:%d: cannot give node %s GPU type %s",
                            whale_site.used_path, line, s->nodes[i], type);
                rv = -1;
            } else {
                slurm_debug(PLUGIN_NAME ": node %s: GPU type %s from Slurm (%s:%d)",
                            s->nodes[i], type, whale_site.used_path, line);
            }
            break;
        }
    }
    slurm_free_node_info_msg(msg);
    return rv;
}
