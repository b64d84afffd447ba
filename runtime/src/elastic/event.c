/* The recovery record: one JSON line for the metrics file and one log line. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "whale/elastic.h"
#include "whale/log.h"
#include "whale/redundancy.h"

void whale_recovery_note_spares(struct whale_recovery_report *r,
                                const struct whale_membership_event *ev)
{
    r->nfailed_spares = ev->nfailed_spares;
    int k = ev->nfailed_spares < 8 ? ev->nfailed_spares : 8;
    for (int i = 0; i < k; i++) {
        r->failed_spare_task[i] = ev->failed_spare_task[i];
        snprintf(r->failed_spare_node[i], sizeof r->failed_spare_node[i], "%s",
                 ev->failed_spare_node[i]);
    }
}

char *whale_recovery_json(const struct whale_recovery_report *r)
{
    json_t *j = json_object();
    json_t *ranks = json_array(), *nodes = json_array();
    int n = r->nfailed < 8 ? r->nfailed : 8;
    for (int i = 0; i < n; i++) {
        json_array_append_new(ranks, json_integer(r->failed_rank[i]));
        json_array_append_new(nodes, json_string(r->failed_node[i]));
    }
    json_object_set_new(j, "event", json_string("recovery"));
    json_object_set_new(j, "kind", json_string(r->kind ? r->kind : "?"));
    json_object_set_new(j, "how", json_string(r->how ? r->how : "?"));
    json_object_set_new(j, "failed_rank", n == 1 ? json_integer(r->failed_rank[0]) : json_copy(ranks));
    json_object_set_new(j, "node", n == 1 ? json_string(r->failed_node[0]) : json_copy(nodes));
    json_decref(ranks);
    json_decref(nodes);
    if (r->tasks_known) {
        json_t *tasks = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(tasks, json_integer(r->failed_task[i]));
        json_object_set_new(j, "failed_task", n == 1 ? json_integer(r->failed_task[0])
                                                     : json_copy(tasks));
        json_decref(tasks);
    }
    json_object_set_new(j, "failed_step", json_integer(r->failed_step));
    json_object_set_new(j, "rollback_step", json_integer(r->rollback_step));
    json_object_set_new(j, "steps_lost", json_integer(r->steps_lost));
    json_object_set_new(j, "source", json_string(r->source ? r->source : "?"));
    json_object_set_new(j, "tp", json_integer(r->tp));
    json_object_set_new(j, "pp", json_integer(r->pp));
    json_object_set_new(j, "dp", json_integer(r->dp));
    json_object_set_new(j, "detect_s", json_real(r->detect_s));
    json_object_set_new(j, "agree_s", json_real(r->agree_s));
    json_object_set_new(j, "transfer_s", json_real(r->transfer_s));
    json_object_set_new(j, "rebuild_s", json_real(r->rebuild_s));
    json_object_set_new(j, "redo_s", json_real(r->redo_s));
    json_object_set_new(j, "total_s", json_real(r->detect_s + r->agree_s + r->transfer_s +
                                                r->rebuild_s + r->redo_s));
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

void whale_recovery_log(const struct whale_recovery_report *r)
{
    char who[256] = "";
    size_t o = 0;
    int n = r->nfailed < 8 ? r->nfailed : 8;
    for (int i = 0; i < n && o < sizeof who - 1; i++) {
        char task[32] = "";
        if (r->tasks_known)
            snprintf(task, sizeof task, " (task %d)", r->failed_task[i]);
        int k = snprintf(who + o, sizeof who - o, "%srank %d%s on %s", i ? ", " : "",
                         r->failed_rank[i], task, r->failed_node[i][0] ? r->failed_node[i] : "?");
        if (k < 0)
            break;
        o += (size_t)k;
    }
    /* a lost spare (e.g. the one lending offload memory) has no rank but
     * the line must still say who failed */
    int ns = r->nfailed_spares < 8 ? r->nfailed_spares : 8;
    for (int i = 0; i < ns && o < sizeof who - 1; i++) {
        int k = snprintf(who + o, sizeof who - o, "%sspare task %d on %s", o ? ", " : "",
                         r->failed_spare_task[i],
                         r->failed_spare_node[i][0] ? r->failed_spare_node[i] : "?");
        if (k < 0)
            break;
        o += (size_t)k;
    }
    if (!who[0])
        snprintf(who, sizeof who, "a task");
    whale_warn("recovery: %s failed during step %lld (detected: %s); %s, state from %s, rolled "
               "back to step %lld (%lld step%s redone), now TP=%d PP=%d DP=%d; detect %.2f s, "
               "agree %.2f s, transfer %.2f s, rebuild %.2f s, redo %.2f s",
               who, (long long)r->failed_step, r->how ? r->how : "?", r->kind ? r->kind : "?",
               r->source ? r->source : "?", (long long)r->rollback_step, (long long)r->steps_lost,
               r->steps_lost == 1 ? "" : "s", r->tp, r->pp, r->dp, r->detect_s, r->agree_s,
               r->transfer_s, r->rebuild_s, r->redo_s);
}
