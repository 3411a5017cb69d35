/* `strata plan schedule`: one pipeline schedule as data. Generates the action lists (the ones the
 * trainer runs), checks them, simulates them with per-chunk costs, prints each stage's busy time,
 * bubble and peak activation memory, and optionally the lists themselves, JSON, or the timeline as
 * SVG. Thin: parse, call src/schedule, print. */
#include "strata/cmd.h"
#include "strata/schedule.h"
#include "strata/status.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: strata plan schedule --schedule gpipe|1f1b|interleaved|zb-h1|zb-v --pp P --micro M\n"
    "                            [--vp V] [--costs F,B,W] [--p2p S] [--actions] [--json]\n"
    "                            [--svg FILE]\n"
    "  --vp V        chunks per stage (interleaved: 2 and up, default 2; zb-v: 2)\n"
    "  --costs F,B,W time of one chunk's forward, input-gradient backward and weight gradient\n"
    "                (default 1,1,1; a schedule that does not split the backward runs B+W)\n"
    "  --p2p S       time a message takes between stages (default 0)\n"
    "  --actions     print every stage's list of actions\n";

static int usage(void)
{
    fputs(usage_text, stderr);
    return 2;
}

static void print_action(const strata_pp_action_t *a)
{
    printf(" %s(%d,%d)", strata_pp_op_name((strata_pp_op_t)a->op), a->mb, a->chunk);
    if (a->peer >= 0)
        printf(a->op == STRATA_PP_SEND_ACT || a->op == STRATA_PP_SEND_GRAD ? "->%d" : "<-%d",
               a->peer);
}

static void print_json(const strata_pp_plan_t *p, const strata_pp_timeline_t *t, bool actions)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "schedule", json_object_new_string(strata_schedule_name(p->kind)));
    json_object_object_add(o, "stages", json_object_new_int(p->stages));
    json_object_object_add(o, "vstages", json_object_new_int(p->vstages));
    json_object_object_add(o, "micro", json_object_new_int(p->micro));
    json_object_object_add(o, "makespan", json_object_new_double(t->makespan));
    json_object_object_add(o, "bubble_mean", json_object_new_double(t->bubble_mean));
    json_object *st = json_object_new_array();
    for (int s = 0; s < p->stages; s++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "stage", json_object_new_int(s));
        json_object_object_add(e, "busy", json_object_new_double(t->busy_s[s]));
        json_object_object_add(e, "bubble", json_object_new_double(t->bubble[s]));
        json_object_object_add(e, "peak_act", json_object_new_double(t->peak_act[s]));
        if (actions) {
            json_object *l = json_object_new_array();
            for (int i = 0; i < p->count[s]; i++) {
                const strata_pp_action_t *a = &p->actions[s][i];
                json_object *x = json_object_new_object();
                json_object_object_add(
                    x, "op", json_object_new_string(strata_pp_op_name((strata_pp_op_t)a->op)));
                json_object_object_add(x, "mb", json_object_new_int(a->mb));
                json_object_object_add(x, "chunk", json_object_new_int(a->chunk));
                if (a->peer >= 0)
                    json_object_object_add(x, "peer", json_object_new_int(a->peer));
                json_object_array_add(l, x);
            }
            json_object_object_add(e, "actions", l);
        }
        json_object_array_add(st, e);
    }
    json_object_object_add(o, "per_stage", st);
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
    json_object_put(o);
}

int cmd_plan_schedule(int argc, char **argv)
{
    strata_schedule_t kind = STRATA_SCHED_1F1B;
    int P = 0, V = 0, M = 0;
    double cost[3] = {1, 1, 1}, p2p = 0;
    bool actions = false, json = false, have_kind = false;
    const char *svg = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!strcmp(a, "--actions") || !strcmp(a, "--json")) {
            *(a[2] == 'a' ? &actions : &json) = true;
            continue;
        }
        if (i + 1 >= argc)
            return usage();
        const char *v = argv[++i];
        if (!strcmp(a, "--schedule")) {
            if (strata_schedule_parse(v, &kind) < 0)
                return cmd_fail(NULL, "%s", strata_last_error());
            have_kind = true;
        } else if (!strcmp(a, "--pp")) {
            if (!cmd_int_option("plan schedule", a, v, 1, 4096, &P))
                return 2;
        } else if (!strcmp(a, "--vp")) {
            if (!cmd_int_option("plan schedule", a, v, 1, 64, &V))
                return 2;
        } else if (!strcmp(a, "--micro")) {
            if (!cmd_int_option("plan schedule", a, v, 1, 1 << 20, &M))
                return 2;
        } else if (!strcmp(a, "--costs")) {
            char *end = NULL;
            const char *q = v;
            for (int k = 0; k < 3; k++) {
                cost[k] = strtod(q, &end);
                if (end == q || !(cost[k] >= 0) || (k < 2 ? *end != ',' : *end != '\0'))
                    return cmd_fail(NULL, "--costs expects F,B,W (three times >= 0), got '%s'",
                                    v);
                q = end + 1;
            }
        } else if (!strcmp(a, "--p2p")) {
            char *end = NULL;
            p2p = strtod(v, &end);
            if (end == v || *end || !(p2p >= 0))
                return cmd_fail(NULL, "--p2p expects a time >= 0, got '%s'", v);
        } else if (!strcmp(a, "--svg")) {
            svg = v;
        } else {
            fprintf(stderr, "strata plan schedule: unknown flag '%s'\n", a);
            return usage();
        }
    }
    if (!have_kind || !P || !M) {
        fprintf(stderr, "strata plan schedule: --schedule, --pp and --micro are required\n");
        return usage();
    }
    if (!V)
        V = kind == STRATA_SCHED_INTERLEAVED || kind == STRATA_SCHED_ZB_V ? 2 : 1;

    strata_pp_plan_t plan;
    if (strata_pp_generate(kind, P, V, M, &plan) < 0)
        return cmd_fail(NULL, "%s", strata_last_error());
    const int C = P * V;
    const bool split = plan.split;
    double *c = malloc(3 * (size_t)C * sizeof *c);
    if (!c) {
        strata_pp_plan_free(&plan);
        return cmd_fail(NULL, "out of memory");
    }
    for (int k = 0; k < C; k++) {
        c[k] = cost[0];
        c[C + k] = split ? cost[1] : cost[1] + cost[2];
        c[2 * C + k] = split ? cost[2] : 0;
    }
    const strata_pp_costs_t costs = {c, c + C, c + 2 * C, p2p, NULL, NULL};
    strata_pp_timeline_t t;
    int rc = 0;
    if (strata_pp_simulate(&plan, &costs, &t) < 0) {
        rc = cmd_fail(NULL, "%s", strata_last_error());
        goto out;
    }
    if (json) {
        print_json(&plan, &t, actions);
    } else {
        printf("%s: %d stages x %d chunk%s, %d micro-batches: checked (dependencies, channel "
               "order, no deadlock)\n",
               strata_schedule_name(kind), P, V, V > 1 ? "s" : "", M);
        if (split)
            printf("per chunk: F %g, B %g, W %g, hop %g\n", cost[0], cost[1], cost[2], p2p);
        else
            printf("per chunk: F %g, B %g (the whole backward), hop %g\n", cost[0],
                   cost[1] + cost[2], p2p);
        printf("stage  actions      busy   bubble  peak activations (micro-batch x chunk)\n");
        for (int s = 0; s < P; s++)
            printf("%5d  %7d  %8.4g  %6.1f%%  %g\n", s, plan.count[s], t.busy_s[s],
                   100 * t.bubble[s], t.peak_act[s]);
        printf("makespan %.6g, mean bubble %.2f%%\n", t.makespan, 100 * t.bubble_mean);
        for (int s = 0; actions && s < P; s++) {
            printf("stage %d:", s);
            for (int i = 0; i < plan.count[s]; i++)
                print_action(&plan.actions[s][i]);
            printf("\n");
        }
    }
    if (svg) {
        FILE *f = fopen(svg, "w");
        if (!f) {
            rc = cmd_fail(NULL, "cannot write %s", svg);
        } else {
            char title[160];
            snprintf(title, sizeof title, "%s: %d stages x %d chunk%s, %d micro-batches",
                     strata_schedule_name(kind), P, V, V > 1 ? "s" : "", M);
            strata_status_t st = strata_pp_timeline_svg(&t, title, NULL, NULL, f);
            if (fclose(f) != 0 || st < 0)
                rc = cmd_fail(NULL, "writing %s: %s", svg,
                              st < 0 ? strata_last_error() : "close failed");
            else if (!json)
                printf("wrote %s\n", svg);
        }
    }
    strata_pp_timeline_free(&t);
out:
    free(c);
    strata_pp_plan_free(&plan);
    return rc;
}
