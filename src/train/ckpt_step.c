/* A checkpoint step of a run: the files of a step in a directory (their names), the manifest that
 * commits a step once all its shards are written and gives it an identity (run id, step, layout,
 * every shard's digest), assembly of the whole parameter arena from a committed step with every
 * shard checked against that identity, and pruning decided for the whole job. Reading and writing one
 * file is checkpoint.c; when to checkpoint and how the ranks agree is the trainer's
 * (trainer_ckpt.c). */
#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "strata/train.h"
#include "train/ckpt_internal.h"

/* ---- file names ---------------------------------------------------------------------------------- */

void strata_ckpt_path(const char *dir, int64_t step, int rank, int nranks, char *out, size_t size)
{
    if (nranks <= 1)
        snprintf(out, size, "%s/ckpt_%08" PRId64 ".safetensors", dir, step);
    else
        snprintf(out, size, "%s/ckpt_%08" PRId64 ".rank%d.safetensors", dir, step, rank);
}

static void manifest_path(const char *dir, int64_t step, char *out, size_t size)
{
    snprintf(out, size, "%s/ckpt_%08" PRId64 ".manifest.json", dir, step);
}

/* A checkpoint file name, parsed. */
typedef struct ck_file {
    char name[256];
    int64_t step;
    int rank;      /* shard: its rank; -1: the unsharded file; -2: the manifest */
    bool tmp;      /* a writer's temporary: <name>.tmp.<pid>[.<host>] */
    long pid;
    char host[256];
} ck_file_t;

/* Reads decimal digits at *p (no sign), advancing *p. */
static bool digits(const char **p, int64_t max, int64_t *out)
{
    const char *s = *p;
    int64_t v = 0;
    if (*s < '0' || *s > '9')
        return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (max - (*s - '0')) / 10)
            return false;
        v = v * 10 + (*s - '0');
    }
    *p = s;
    *out = v;
    return true;
}

static bool parse_name(const char *name, ck_file_t *f)
{
    const char *p = name;
    int64_t v;
    if (strncmp(p, "ckpt_", 5) != 0 || strlen(name) >= sizeof f->name)
        return false;
    p += 5;
    if (!digits(&p, ST_CKPT_INT_MAX, &f->step))
        return false;
    if (!strncmp(p, ".safetensors", 12)) {
        f->rank = -1;
        p += 12;
    } else if (!strncmp(p, ".manifest.json", 14)) {
        f->rank = -2;
        p += 14;
    } else if (!strncmp(p, ".rank", 5)) {
        p += 5;
        if (!digits(&p, ST_CKPT_RANKS_MAX, &v) || strncmp(p, ".safetensors", 12) != 0)
            return false;
        f->rank = (int)v;
        p += 12;
    } else {
        return false;
    }
    snprintf(f->name, sizeof f->name, "%s", name);
    f->tmp = false;
    f->host[0] = 0;
    if (!*p)
        return true;
    if (strncmp(p, ".tmp.", 5) != 0)
        return false;
    p += 5;
    if (!digits(&p, 1 << 30, &v))
        return false;
    f->tmp = true;
    f->pid = (long)v;
    if (*p == '.' && p[1])
        snprintf(f->host, sizeof f->host, "%s", p + 1);
    else if (*p)
        return false;
    return true;
}

/* Every checkpoint file of dir (malloc'd array, *n entries); NULL with *n = 0 when none or no dir. */
static ck_file_t *scan(const char *dir, int *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    ck_file_t *fs = NULL;
    int cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        ck_file_t f;
        if (!parse_name(de->d_name, &f))
            continue;
        if (*n == cap) {
            ck_file_t *g = realloc(fs, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *fs);
            if (!g)
                break;
            fs = g;
        }
        fs[(*n)++] = f;
    }
    closedir(d);
    return fs;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Distinct steps of the files that pass `want`, newest first (at most max). */
static int steps_where(const char *dir, bool (*want)(const ck_file_t *, int, int), int rank,
                       int nranks, int64_t *steps, int max)
{
    int n, k = 0;
    ck_file_t *fs = scan(dir, &n);
    int64_t *all = malloc(((size_t)n + 1) * sizeof *all);
    for (int i = 0; all && i < n; i++)
        if (want(&fs[i], rank, nranks))
            all[k++] = fs[i].step;
    free(fs);
    if (!all)
        return 0;
    qsort(all, (size_t)k, sizeof *all, cmp_desc);
    int out = 0;
    for (int i = 0; i < k && out < max; i++)
        if (i == 0 || all[i] != all[i - 1])
            steps[out++] = all[i];
    free(all);
    return out;
}

static bool is_rank_file(const ck_file_t *f, int rank, int nranks)
{
    return !f->tmp && (nranks <= 1 ? f->rank == -1 : f->rank == rank);
}

static bool is_manifest(const ck_file_t *f, int rank, int nranks)
{
    (void)rank, (void)nranks;
    return !f->tmp && f->rank == -2;
}

int strata_ckpt_list(const char *dir, int rank, int nranks, int64_t *steps, int max)
{
    return steps_where(dir, is_rank_file, rank, nranks, steps, max);
}

int strata_ckpt_steps(const char *dir, int64_t *steps, int max)
{
    return steps_where(dir, is_manifest, 0, 0, steps, max);
}

int strata_ckpt_count_files(const char *dir, char *first, size_t size)
{
    int n;
    ck_file_t *fs = scan(dir, &n);
    int best = -1;
    for (int i = 0; i < n; i++)
        if (best < 0 || fs[i].step > fs[best].step)
            best = i;
    if (first && size)
        snprintf(first, size, "%s", best >= 0 ? fs[best].name : "");
    free(fs);
    return n;
}

/* ---- the manifest -------------------------------------------------------------------------------- */

void strata_ckpt_manifest_free(strata_ckpt_manifest_t *m)
{
    if (!m)
        return;
    free(m->shards);
    free(m->stages);
    m->shards = NULL;
    m->stages = NULL;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

strata_status_t strata_ckpt_commit(const char *dir, const strata_ckpt_manifest_t *m)
{
    return st_ckpt_commit(dir, m, true);
}

strata_status_t st_ckpt_commit(const char *dir, const strata_ckpt_manifest_t *m, bool durable)
{
    char path[2048], file[2048], num[32];
    manifest_path(dir, m->step, path, sizeof path);
    if (m->nranks < 1 || m->nranks > ST_CKPT_RANKS_MAX || !m->shards || m->step < 0 ||
        m->step > ST_CKPT_INT_MAX || strlen(m->run_id) != 16)
        return st_error(STRATA_ERR_INVALID_ARG, "checkpoint %s: malformed manifest (not written)",
                        path);
    json_object *root = json_object_new_object(), *shards = json_object_new_array();
    json_object_object_add(root, "format", json_object_new_string("strata-step"));
    json_object_object_add(root, "version", json_object_new_int(1));
    json_object_object_add(root, "run_id", json_object_new_string(m->run_id));
    json_object_object_add(root, "step", json_object_new_int64(m->step));
    json_object_object_add(root, "nranks", json_object_new_int(m->nranks));
    json_object_object_add(root, "nparams", json_object_new_int64(m->nparams));
    json_object_object_add(root, "tp", json_object_new_int(m->tp > 1 ? m->tp : 1));
    json_object_object_add(root, "pp", json_object_new_int(m->pp > 1 ? m->pp : 1));
    if (m->pp > 1 && m->stages) {
        json_object *st = json_object_new_array();
        for (int s = 0; s < m->pp; s++) {
            json_object *chunks = json_object_new_array();
            for (int k = 0; k < m->stages[s].n; k++) {
                json_object *r = json_object_new_array();
                json_object_array_add(r, json_object_new_int(m->stages[s].begin[k]));
                json_object_array_add(r, json_object_new_int(m->stages[s].end[k]));
                json_object_array_add(chunks, r);
            }
            json_object_array_add(st, chunks);
        }
        json_object_object_add(root, "stages", st);
    }
    snprintf(num, sizeof num, "%" PRIu64, m->seed);
    json_object_object_add(root, "seed", json_object_new_string(num));
    json_object_object_add(root, "config", json_object_new_string(m->config));
    for (int r = 0; r < m->nranks; r++) {
        json_object *s = json_object_new_object();
        strata_ckpt_path(dir, m->step, r, m->nranks, file, sizeof file);
        snprintf(num, sizeof num, "%08" PRIx32, m->shards[r].header_crc32);
        json_object_object_add(s, "file", json_object_new_string(base_name(file)));
        json_object_object_add(s, "bytes", json_object_new_int64((int64_t)m->shards[r].bytes));
        json_object_object_add(s, "header_crc32", json_object_new_string(num));
        json_object_array_add(shards, s);
    }
    json_object_object_add(root, "shards", shards);
    json_object_object_add(root, "manifest_crc32", json_object_new_string("00000000"));
    const char *txt = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY);
    size_t len = strlen(txt);
    char *buf = malloc(len + 2);
    if (!buf) {
        json_object_put(root);
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    }
    memcpy(buf, txt, len);
    buf[len++] = '\n';
    json_object_put(root);
    uint32_t crc;
    size_t at;
    strata_status_t rc;
    if (!st_ckpt_sealed_crc(NULL, 0, buf, len, "manifest_crc32", &crc, &at)) {
        rc = st_error(STRATA_ERR_INTERNAL, "checkpoint %s: cannot seal the manifest", path);
    } else {
        st_ckpt_put_crc(buf, at, crc);
        const void *bufs[1] = {buf};
        rc = st_ckpt_write_atomic(path, bufs, &len, 1, durable);
    }
    free(buf);
    return rc;
}

strata_status_t strata_ckpt_uncommit(const char *dir, int64_t step)
{
    char path[2048];
    manifest_path(dir, step, path, sizeof path);
    if (unlink(path) != 0 && errno != ENOENT)
        return st_error_errno(STRATA_ERR_IO, errno, "checkpoint: cannot remove %s", path);
    return STRATA_OK;
}

/* A JSON integer field in [lo, hi]. */
static bool get_int(json_object *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && st_ckpt_json_int(v, lo, hi, out);
}

static const char *get_str(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return json_object_get_string(v);
}

static strata_status_t read_text(const char *path, char **out, size_t *len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return st_error_errno(STRATA_ERR_IO, errno, "checkpoint %s: cannot open", path);
    struct stat st;
    char *buf = NULL;
    strata_status_t rc = STRATA_OK;
    if (fstat(fileno(f), &st) != 0 || st.st_size > (64 << 20)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: not a manifest (size)", path);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    } else if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
        rc = st_error(STRATA_ERR_IO, "checkpoint %s: read failed", path);
    } else {
        buf[st.st_size] = 0;
        *len = (size_t)st.st_size;
        *out = buf;
        buf = NULL;
    }
    free(buf);
    fclose(f);
    return rc;
}

static strata_status_t parse_manifest(const char *dir, int64_t step, const char *path,
                                      json_object *root, strata_ckpt_manifest_t *m)
{
#define BAD(...) return st_error(STRATA_ERR_PARSE, __VA_ARGS__)
    const char *s;
    int64_t v;
    if (!json_object_is_type(root, json_type_object) || !(s = get_str(root, "format")) ||
        strcmp(s, "strata-step") != 0)
        BAD("checkpoint %s: not a strata step manifest", path);
    if (!get_int(root, "version", 1, 1, &v))
        BAD("checkpoint %s: manifest \"version\" is not 1", path);
    if (!(s = get_str(root, "run_id")) || strlen(s) != 16 || strspn(s, "0123456789abcdef") != 16)
        BAD("checkpoint %s: manifest \"run_id\" is not 16 hex digits", path);
    snprintf(m->run_id, sizeof m->run_id, "%s", s);
    if (!get_int(root, "step", 0, ST_CKPT_INT_MAX, &m->step) || m->step != step)
        BAD("checkpoint %s: manifest \"step\" is not %" PRId64, path, step);
    if (!get_int(root, "nranks", 1, ST_CKPT_RANKS_MAX, &v))
        BAD("checkpoint %s: manifest \"nranks\" is not an integer in [1, %d]", path,
            ST_CKPT_RANKS_MAX);
    m->nranks = (int)v;
    if (!get_int(root, "nparams", 1, ST_CKPT_INT_MAX, &m->nparams))
        BAD("checkpoint %s: manifest \"nparams\" is not an integer in [1, 2^53]", path);
    m->tp = 1; // absent in the manifests of strata before tensor parallelism
    if (json_object_object_get_ex(root, "tp", NULL)) {
        if (!get_int(root, "tp", 1, 1024, &v) || m->nranks % v)
            BAD("checkpoint %s: manifest \"tp\" is not an integer in [1, 1024] dividing nranks %d",
                path, m->nranks);
        m->tp = (int)v;
    }
    m->pp = 1;
    m->stages = NULL;
    if (json_object_object_get_ex(root, "pp", NULL)) {
        if (!get_int(root, "pp", 1, 1024, &v) || m->nranks % (m->tp * v))
            BAD("checkpoint %s: manifest \"pp\" is not an integer in [1, 1024] with tp x pp "
                "dividing nranks %d", path, m->nranks);
        m->pp = (int)v;
    }
    if (m->pp > 1) { // every stage's chunks: [[b, e], ...], ascending and disjoint (the model checks)
        json_object *st;
        if (!json_object_object_get_ex(root, "stages", &st) ||
            !json_object_is_type(st, json_type_array) ||
            json_object_array_length(st) != (size_t)m->pp)
            BAD("checkpoint %s: manifest \"stages\" is not a list of %d stages", path, m->pp);
        m->stages = calloc((size_t)m->pp, sizeof *m->stages);
        if (!m->stages)
            return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
        for (int i = 0; i < m->pp; i++) {
            json_object *ch = json_object_array_get_idx(st, (size_t)i);
            size_t n = json_object_is_type(ch, json_type_array) ? json_object_array_length(ch) : 0;
            if (n < 1 || n > STRATA_GPT_MAX_CHUNKS)
                BAD("checkpoint %s: manifest stage %d: expected 1 to %d chunks [begin, end]", path,
                    i, STRATA_GPT_MAX_CHUNKS);
            m->stages[i].n = (int)n;
            for (size_t k = 0; k < n; k++) {
                json_object *r = json_object_array_get_idx(ch, k), *b = NULL, *e = NULL;
                if (json_object_is_type(r, json_type_array) && json_object_array_length(r) == 2) {
                    b = json_object_array_get_idx(r, 0);
                    e = json_object_array_get_idx(r, 1);
                }
                if (!json_object_is_type(b, json_type_int) || !json_object_is_type(e, json_type_int))
                    BAD("checkpoint %s: manifest stage %d chunk %zu: expected [begin, end]", path,
                        i, k);
                m->stages[i].begin[k] = json_object_get_int(b);
                m->stages[i].end[k] = json_object_get_int(e);
            }
        }
    }
    char *end;
    errno = 0;
    if (!(s = get_str(root, "seed")) || !(*s >= '0' && *s <= '9') ||
        (m->seed = strtoull(s, &end, 10), errno || *end))
        BAD("checkpoint %s: manifest \"seed\" is not an unsigned integer", path);
    if (!(s = get_str(root, "config")) || strlen(s) >= sizeof m->config)
        BAD("checkpoint %s: manifest \"config\" missing or too long", path);
    snprintf(m->config, sizeof m->config, "%s", s);
    json_object *sh;
    if (!json_object_object_get_ex(root, "shards", &sh) ||
        !json_object_is_type(sh, json_type_array) ||
        json_object_array_length(sh) != (size_t)m->nranks)
        BAD("checkpoint %s: manifest \"shards\" is not a list of %d entries", path, m->nranks);
    m->shards = calloc((size_t)m->nranks, sizeof *m->shards);
    if (!m->shards)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    char want[2048];
    for (int r = 0; r < m->nranks; r++) {
        json_object *e = json_object_array_get_idx(sh, (size_t)r);
        strata_ckpt_path(dir, step, r, m->nranks, want, sizeof want);
        if (!json_object_is_type(e, json_type_object) || !(s = get_str(e, "file")) ||
            strcmp(s, base_name(want)) != 0)
            BAD("checkpoint %s: shard %d is not named %s", path, r, base_name(want));
        if (!get_int(e, "bytes", 8, ST_CKPT_INT_MAX, &v))
            BAD("checkpoint %s: shard %d \"bytes\" is not an integer in [8, 2^53]", path, r);
        m->shards[r].bytes = (uint64_t)v;
        if (!(s = get_str(e, "header_crc32")) || !st_ckpt_parse_crc(s, &m->shards[r].header_crc32))
            BAD("checkpoint %s: shard %d \"header_crc32\" is not 8 hex digits", path, r);
    }
    return STRATA_OK;
#undef BAD
}

strata_status_t strata_ckpt_manifest_read(const char *dir, int64_t step,
                                          strata_ckpt_manifest_t *m)
{
    memset(m, 0, sizeof *m);
    char path[2048], *txt;
    size_t len = 0;
    manifest_path(dir, step, path, sizeof path);
    ST_TRY(read_text(path, &txt, &len));
    uint32_t want, got;
    size_t at;
    strata_status_t rc = STRATA_OK;
    json_object *root = NULL;
    if (!st_ckpt_sealed_crc(NULL, 0, txt, len, "manifest_crc32", &got, &at) ||
        !st_ckpt_parse_crc(txt + at, &want)) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: no manifest_crc32 (not a strata step "
                      "manifest, or truncated)", path);
    } else if (want != got) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: manifest checksum mismatch "
                      "(%08" PRIx32 " stored, %08" PRIx32 " computed): altered or corrupt", path,
                      want, got);
    } else if (!(root = json_tokener_parse(txt))) {
        rc = st_error(STRATA_ERR_PARSE, "checkpoint %s: manifest is not JSON", path);
    } else {
        rc = parse_manifest(dir, step, path, root, m);
    }
    if (root)
        json_object_put(root);
    free(txt);
    if (rc < 0)
        strata_ckpt_manifest_free(m);
    return rc;
}

strata_status_t strata_ckpt_manifest_model(const strata_ckpt_manifest_t *m,
                                           strata_gpt_config_t *out)
{
    char origin[64];
    snprintf(origin, sizeof origin, "checkpoint step %" PRId64 " config", m->step);
    *out = strata_gpt_config_default();
    json_object *root = json_tokener_parse(m->config), *model;
    strata_status_t rc = STRATA_OK;
    if (!root || !json_object_is_type(root, json_type_object) ||
        !json_object_object_get_ex(root, "model", &model))
        rc = st_error(STRATA_ERR_PARSE, "%s: no \"model\" in the recorded config", origin);
    else if (strata_gpt_config_from_json(json_object_to_json_string(model), origin, out) < 0 ||
             strata_gpt_config_validate(out) < 0)
        rc = st_error(STRATA_ERR_PARSE, "%s", strata_last_error());
    if (root)
        json_object_put(root);
    return rc;
}

/* ---- assembly ------------------------------------------------------------------------------------ */

void strata_ckpt_full_free(strata_ckpt_full_t *f)
{
    if (!f)
        return;
    free(f->params);
    free(f->m);
    free(f->v);
    f->params = f->m = f->v = NULL;
}

static strata_status_t assemble_unsharded(const strata_gpt_t *m, strata_ckpt_t *ck, bool with_state,
                                          strata_ckpt_full_t *out)
{
    int nt = strata_model_ntensors(m);
    for (int i = 0; i < nt; i++) {
        const strata_tensor_info_t *ti = strata_model_tensor(m, i);
        strata_ckpt_tensor_t ct = {ti->name, ti->ndim, {ti->full_shape[0], ti->full_shape[1]},
                                   out->params + ti->full_offset}; // m may be a TP part
        ST_TRY(strata_ckpt_load(ck, &ct, 1));
    }
    if (with_state) {
        strata_ckpt_tensor_t st[2] = {{"optim.m", 1, {(int64_t)out->nparams}, out->m},
                                      {"optim.v", 1, {(int64_t)out->nparams}, out->v}};
        ST_TRY(strata_ckpt_load(ck, st, 2));
    }
    return STRATA_OK;
}

/* The offset of a shard tensor name "<prefix>@<off>", or -1. */
static int64_t range_offset(const char *name, const char *prefix)
{
    size_t pl = strlen(prefix);
    int64_t off;
    const char *p = name + pl + 1;
    if (strncmp(name, prefix, pl) != 0 || name[pl] != '@' || !digits(&p, ST_CKPT_INT_MAX, &off) ||
        *p)
        return -1;
    return off;
}

/* Copies one shard file's ranges into the arena-indexed arrays, marking coverage. */
static strata_status_t assemble_shard(const char *path, strata_ckpt_t *ck, bool with_state,
                                      strata_ckpt_full_t *out, unsigned char *seen)
{
    size_t P = out->nparams;
    for (int i = 0; i < strata_ckpt_ntensors(ck); i++) {
        const char *name = strata_ckpt_tensor_name(ck, i);
        int64_t off = range_offset(name, "params");
        if (off < 0)
            continue;
        int nd;
        int64_t shape[4];
        const float *src = strata_ckpt_find(ck, name, &nd, shape);
        size_t cnt = (size_t)shape[0];
        if (nd != 1 || (size_t)off > P || cnt > P - (size_t)off)
            return st_error(STRATA_ERR_PARSE, "checkpoint %s: range '%s' of %zu floats outside "
                            "the model's %zu parameters", path, name, cnt, P);
        for (size_t k = (size_t)off; k < (size_t)off + cnt; k++) {
            if (seen[k])
                return st_error(STRATA_ERR_PARSE, "checkpoint %s: range '%s' overlaps another "
                                "shard", path, name);
            seen[k] = 1;
        }
        memcpy(out->params + off, src, cnt * sizeof(float));
        if (with_state) {
            char nm[64];
            float *dst[2] = {out->m, out->v};
            const char *pre[2] = {"optim.m", "optim.v"};
            for (int k = 0; k < 2; k++) {
                snprintf(nm, sizeof nm, "%s@%" PRId64, pre[k], off);
                strata_ckpt_tensor_t ct = {nm, 1, {(int64_t)cnt}, dst[k] + off};
                ST_TRY(strata_ckpt_load(ck, &ct, 1));
            }
        }
    }
    return STRATA_OK;
}

/* Opens shard r of a committed step and checks it is the file the manifest names: same digest,
 * run, step, rank and rank count. */
static strata_status_t open_listed(const char *dir, const strata_ckpt_manifest_t *mf, int r,
                                   char *path, size_t size, strata_ckpt_t **ck)
{
    strata_ckpt_path(dir, mf->step, r, mf->nranks, path, size);
    if (access(path, F_OK) != 0)
        return st_error(STRATA_ERR_IO, "checkpoint step %" PRId64 " in %s is incomplete: %s (rank "
                        "%d of %d) is missing", mf->step, dir, path, r, mf->nranks);
    ST_TRY(strata_ckpt_open(path, ck));
    const strata_ckpt_meta_t *md = strata_ckpt_meta(*ck);
    strata_ckpt_digest_t d = strata_ckpt_digest(*ck);
    const strata_ckpt_digest_t *w = &mf->shards[r];
    const char *why = NULL;
    char buf[160];
    if (strcmp(md->run_id, mf->run_id) != 0) {
        snprintf(buf, sizeof buf, "it belongs to run %s, the step to run %s (a shard of another "
                 "run)", md->run_id[0] ? md->run_id : "(none)", mf->run_id);
        why = buf;
    } else if (md->step != mf->step) {
        snprintf(buf, sizeof buf, "it holds step %" PRId64 " (a shard of another step)", md->step);
        why = buf;
    } else if (md->rank != r || md->nranks != mf->nranks) {
        snprintf(buf, sizeof buf, "it is rank %d of %d, expected rank %d of %d", md->rank,
                 md->nranks, r, mf->nranks);
        why = buf;
    } else if (d.header_crc32 != w->header_crc32 || d.bytes != w->bytes) {
        snprintf(buf, sizeof buf, "its digest %08" PRIx32 "/%" PRIu64 " bytes is not the "
                 "manifest's %08" PRIx32 "/%" PRIu64 " (a stale or mixed shard: written by "
                 "another attempt at this step)", d.header_crc32, d.bytes, w->header_crc32,
                 w->bytes);
        why = buf;
    }
    if (why) {
        strata_ckpt_close(*ck);
        *ck = NULL;
        return st_error(STRATA_ERR_PARSE, "checkpoint %s: not the shard committed for step "
                        "%" PRId64 ": %s", path, mf->step, why);
    }
    return STRATA_OK;
}

/* The floats of (stage s, every TP rank) in step mf, or 0 when its chunks do not fit the model. */
static size_t stage_floats(const strata_gpt_config_t *mc, const strata_ckpt_manifest_t *mf, int s)
{
    return strata_gpt_config_part_nparams(mc, mf->tp, mf->stages ? &mf->stages[s] : NULL) *
           (size_t)mf->tp;
}

/* The arena of step mf as written: the whole model's (tp and pp 1) or the parts of every (stage, TP
 * rank) one after another. */
static strata_status_t written_arena(const strata_gpt_t *m, const strata_ckpt_manifest_t *mf,
                                     const char *dir, size_t *P)
{
    char have[1024], want[1024];
    strata_gpt_config_t mc;
    ST_TRY(strata_ckpt_manifest_model(mf, &mc));
    *P = 0;
    bool fits = true;
    for (int s = 0; s < mf->pp; s++) {
        size_t n = stage_floats(&mc, mf, s);
        fits &= n > 0;
        *P += n;
    }
    if (strata_gpt_config_to_json(&mc, have, sizeof have) < 0 ||
        strata_gpt_config_to_json(strata_model_config(m), want, sizeof want) < 0 ||
        strcmp(have, want) != 0 || (size_t)mf->nparams != *P || !fits)
        return st_error(STRATA_ERR_INVALID_ARG, "checkpoint step %" PRId64 " in %s holds the "
                        "model %s (%" PRId64 " floats over TP %d x PP %d), not this one, %s",
                        mf->step, dir, have, mf->nparams, mf->tp, mf->pp, want);
    return STRATA_OK;
}

/* Turns the parts of a tensor- or pipeline-parallel step into the whole model's arena, in place of
 * `*a`. */
static strata_status_t to_whole(const strata_gpt_t *m, const strata_ckpt_manifest_t *mf, float **a)
{
    if (!*a || (mf->tp <= 1 && mf->pp <= 1))
        return STRATA_OK;
    float *whole = malloc(strata_model_full_nparams(m) * sizeof(float));
    if (!whole)
        return st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory");
    const strata_gpt_config_t *mc = strata_model_config(m);
    strata_status_t rc = STRATA_OK;
    size_t at = 0;
    for (int s = 0; s < mf->pp && rc == STRATA_OK; s++) {
        const strata_gpt_layers_t *ly = mf->stages ? &mf->stages[s] : NULL;
        rc = strata_gpt_arena_convert(mc, mf->tp, ly, whole, *a + at, false);
        at += stage_floats(mc, mf, s);
    }
    free(*a);
    *a = whole;
    return rc;
}

strata_status_t strata_ckpt_assemble(const strata_gpt_t *m, const char *dir, int64_t step,
                                     bool with_state, strata_ckpt_full_t *out)
{
    memset(out, 0, sizeof *out);
    strata_ckpt_manifest_t mf;
    ST_TRY(strata_ckpt_manifest_read(dir, step, &mf));
    size_t P = 0;
    strata_status_t rc = STRATA_OK;
    strata_ckpt_t *ck = NULL;
    unsigned char *seen = NULL;
    char path[2048];
    ST_TRY_GOTO(written_arena(m, &mf, dir, &P), rc, out);
    out->nparams = P;
    out->params = malloc(P * sizeof(float));
    if (with_state) {
        out->m = malloc(P * sizeof(float));
        out->v = malloc(P * sizeof(float));
    }
    seen = calloc(P, 1);
    if (!out->params || !seen || (with_state && (!out->m || !out->v))) {
        rc = st_error(STRATA_ERR_NO_MEMORY, "checkpoint: out of memory assembling step %" PRId64,
                      step);
        goto out;
    }
    for (int r = 0; r < mf.nranks; r++) {
        ST_TRY_GOTO(open_listed(dir, &mf, r, path, sizeof path, &ck), rc, out);
        if (r == 0)
            out->meta = *strata_ckpt_meta(ck);
        if (mf.nranks == 1 && strata_ckpt_find(ck, "optim.m", NULL, NULL)) {
            ST_TRY_GOTO(assemble_unsharded(m, ck, with_state, out), rc, out);
            memset(seen, 1, P);
        } else {
            ST_TRY_GOTO(assemble_shard(path, ck, with_state, out, seen), rc, out);
        }
        strata_ckpt_close(ck);
        ck = NULL;
    }
    for (size_t k = 0; k < P; k++)
        if (!seen[k]) {
            rc = st_error(STRATA_ERR_PARSE, "checkpoint step %" PRId64 " in %s: the %d shard "
                          "files leave parameter %zu uncovered", step, dir, mf.nranks, k);
            goto out;
        }
    ST_TRY_GOTO(to_whole(m, &mf, &out->params), rc, out);
    ST_TRY_GOTO(to_whole(m, &mf, &out->m), rc, out);
    ST_TRY_GOTO(to_whole(m, &mf, &out->v), rc, out);
    out->nparams = strata_model_full_nparams(m);
out:
    strata_ckpt_close(ck);
    strata_ckpt_manifest_free(&mf);
    free(seen);
    if (rc < 0)
        strata_ckpt_full_free(out);
    return rc;
}

/* ---- pruning ------------------------------------------------------------------------------------- */

static void remove_file(const char *dir, const char *name, int *removed)
{
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (unlink(path) == 0)
        (*removed)++;
}

/* Removes every file (temporaries excepted) of every step older than `below` that is not one of
 * kept[0..nk): manifests first (pass 0), so a step stops existing before any of its shards goes. */
static int remove_steps(const char *dir, int64_t below, const int64_t *kept, int nk)
{
    int nf, removed = 0;
    ck_file_t *fs = scan(dir, &nf);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nf; i++) {
            bool manifest = fs[i].rank == -2, doomed = !fs[i].tmp && fs[i].step < below;
            for (int k = 0; k < nk && doomed; k++)
                doomed = fs[i].step != kept[k];
            if (doomed && manifest == (pass == 0))
                remove_file(dir, fs[i].name, &removed);
        }
    free(fs);
    return removed;
}

int strata_ckpt_prune(const char *dir, int64_t newest, int keep)
{
    int64_t steps[4096], kept[1024];
    int n = strata_ckpt_steps(dir, steps, 4096), nk = 0;
    if (keep < 1)
        keep = 1;
    if (keep > 1024)
        keep = 1024;
    kept[nk++] = newest;
    // Only manifests that read back count: a damaged one must not push a good step out.
    for (int i = 0; i < n && nk < keep; i++) {
        strata_ckpt_manifest_t m;
        if (steps[i] >= newest || strata_ckpt_manifest_read(dir, steps[i], &m) < 0)
            continue;
        strata_ckpt_manifest_free(&m);
        kept[nk++] = steps[i];
    }
    return remove_steps(dir, newest, kept, nk);
}

int st_ckpt_keep_only(const char *dir, int64_t step)
{
    return remove_steps(dir, INT64_MAX, &step, 1);
}

int strata_ckpt_clean_tmp(const char *dir)
{
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++)
        if (*h == '/')
            *h = '_';
    int nf, removed = 0;
    ck_file_t *fs = scan(dir, &nf);
    for (int i = 0; i < nf; i++) {
        if (!fs[i].tmp || (fs[i].host[0] && strcmp(fs[i].host, host) != 0))
            continue; // another host's writer: its liveness cannot be seen from here
        if (fs[i].pid > 0 && (kill((pid_t)fs[i].pid, 0) == 0 || errno == EPERM))
            continue; // alive
        remove_file(dir, fs[i].name, &removed);
    }
    free(fs);
    return removed;
}
