/* Unit tests of the enum names (src/comm/dtype.c) and of the communicator config read from knobs
 * and launcher environments (src/comm/bootstrap/launch_env.c): torchrun/strata launch, Slurm, Open
 * MPI and MPICH variable sets, their precedence, and missing or malformed values. Every test starts
 * from an environment with all launcher and STRATA_* variables removed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness/st_test.h"

/* Everything config_from_env may look at. */
static const char *const env_vars[] = {
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LAUNCH_NODE_IPADDR",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "STRATA_STORE_ADDR",
    "STRATA_STORE_EXTERNAL",
    "TORCHELASTIC_USE_AGENT_STORE",
    "PMIX_NAMESPACE",
    "PMIX_RANK",
    "PMI_FD",
    "SLURM_STEP_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_STEP_RESV_PORTS",
    "SLURM_DISTRIBUTION",
    "SLURM_HOSTFILE",
    "STRATA_SECRET",
    "STRATA_JOB_ID",
    "STRATA_COMM_TIMEOUT_MS",
    "STRATA_COMM_TRANSPORT",
};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof env_vars / sizeof env_vars[0]; i++)
        unsetenv(env_vars[i]);
    return 0;
}

static void set(const char *name, const char *value)
{
    assert_int_equal(setenv(name, value, 1), 0);
}

/* Expects config_from_env to fail with INVALID_ARG and a message containing every `needles`. */
static void expect_env_error(const char *const *needles, size_t n)
{
    strata_comm_config_t cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    strata_comm_config_t before = cfg;
    strata_status_t rc = strata_comm_config_from_env(&cfg);
    if (rc != STRATA_ERR_INVALID_ARG)
        fail_msg("expected STRATA_ERR_INVALID_ARG, got %s (%s)", strata_status_name(rc),
                 strata_last_error());
    for (size_t i = 0; i < n; i++)
        if (!strstr(strata_last_error(), needles[i]))
            fail_msg("message '%s' does not mention '%s'", strata_last_error(), needles[i]);
    assert_memory_equal(&cfg, &before, sizeof cfg); // untouched on error
}
#define EXPECT_ENV_ERROR(...)                                             \
    do {                                                                  \
        const char *const needles_[] = {__VA_ARGS__};                     \
        expect_env_error(needles_, sizeof needles_ / sizeof needles_[0]); \
    } while (0)

static strata_comm_config_t from_env_ok(void)
{
    strata_comm_config_t cfg;
    strata_status_t rc = strata_comm_config_from_env(&cfg);
    if (rc != STRATA_OK)
        fail_msg("config_from_env: %s: %s", strata_status_name(rc), strata_last_error());
    return cfg;
}

/* ---- names ----------------------------------------------------------------------------------- */

static void test_dtype_names(void **state)
{
    (void)state;
    static const struct {
        strata_dtype_t dt;
        const char *name;
        size_t size;
    } want[] = {
        {STRATA_DTYPE_F32, "f32", 4},   {STRATA_DTYPE_F64, "f64", 8}, {STRATA_DTYPE_F16, "f16", 2},
        {STRATA_DTYPE_BF16, "bf16", 2}, {STRATA_DTYPE_I32, "i32", 4}, {STRATA_DTYPE_I64, "i64", 8},
        {STRATA_DTYPE_U8, "u8", 1},
    };
    assert_int_equal(sizeof want / sizeof want[0], STRATA_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(strata_dtype_name(want[i].dt), want[i].name);
        assert_int_equal(strata_dtype_size(want[i].dt), want[i].size);
        strata_dtype_t got = STRATA_DTYPE_COUNT;
        assert_int_equal(strata_dtype_parse(want[i].name, &got), STRATA_OK);
        assert_int_equal(got, want[i].dt);
    }
    static const struct {
        const char *alias;
        strata_dtype_t dt;
    } aliases[] = {
        {"float32", STRATA_DTYPE_F32}, {"float", STRATA_DTYPE_F32},
        {"FLOAT", STRATA_DTYPE_F32},   {"float64", STRATA_DTYPE_F64},
        {"double", STRATA_DTYPE_F64},  {"float16", STRATA_DTYPE_F16},
        {"half", STRATA_DTYPE_F16},    {"bfloat16", STRATA_DTYPE_BF16},
        {"BF16", STRATA_DTYPE_BF16},   {"int32", STRATA_DTYPE_I32},
        {"int64", STRATA_DTYPE_I64},   {"uint8", STRATA_DTYPE_U8},
    };
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        strata_dtype_t got = STRATA_DTYPE_COUNT;
        assert_int_equal(strata_dtype_parse(aliases[i].alias, &got), STRATA_OK);
        assert_int_equal(got, aliases[i].dt);
    }
    assert_null(strata_dtype_name(STRATA_DTYPE_COUNT));
    assert_null(strata_dtype_name((strata_dtype_t)-1));
    assert_int_equal(strata_dtype_size(STRATA_DTYPE_COUNT), 0);
    assert_int_equal(strata_dtype_size((strata_dtype_t)-1), 0);
}

static void test_dtype_parse_bad(void **state)
{
    (void)state;
    const char *bad[] = {"f33", "", "float 32", "f32 ", "int8", "i16", "bfloat"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strata_dtype_t got = STRATA_DTYPE_F64;
        assert_int_equal(strata_dtype_parse(bad[i], &got), STRATA_ERR_INVALID_ARG);
        assert_int_equal(got, STRATA_DTYPE_F64); // untouched
        assert_non_null(strstr(strata_last_error(), "valid: f32 f64 f16 bf16 i32 i64 u8"));
        char quoted[32];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        assert_non_null(strstr(strata_last_error(), quoted));
    }
    strata_dtype_t got;
    assert_int_equal(strata_dtype_parse(NULL, &got), STRATA_ERR_INVALID_ARG);
    assert_int_equal(strata_dtype_parse("f32", NULL), STRATA_ERR_INVALID_ARG);
}

static void test_op_names(void **state)
{
    (void)state;
    const char *names[] = {"sum", "prod", "min", "max", "avg"};
    assert_int_equal(sizeof names / sizeof names[0], STRATA_OP_COUNT);
    for (int i = 0; i < STRATA_OP_COUNT; i++) {
        assert_string_equal(strata_op_name((strata_op_t)i), names[i]);
        strata_op_t got = STRATA_OP_COUNT;
        assert_int_equal(strata_op_parse(names[i], &got), STRATA_OK);
        assert_int_equal(got, i);
    }
    strata_op_t got = STRATA_OP_MIN;
    assert_int_equal(strata_op_parse("MAX", &got), STRATA_OK);
    assert_int_equal(got, STRATA_OP_MAX);
    assert_int_equal(strata_op_parse("mean", &got), STRATA_ERR_INVALID_ARG);
    assert_int_equal(got, STRATA_OP_MAX);
    assert_non_null(strstr(strata_last_error(), "'mean'"));
    assert_non_null(strstr(strata_last_error(), "sum prod min max avg"));
    assert_int_equal(strata_op_parse(NULL, &got), STRATA_ERR_INVALID_ARG);
    assert_null(strata_op_name(STRATA_OP_COUNT));
}

static void test_coll_names(void **state)
{
    (void)state;
    const char *names[] = {"allreduce", "reduce", "bcast",   "reduce_scatter", "allgather",
                           "alltoall",  "gather", "scatter", "barrier"};
    assert_int_equal(sizeof names / sizeof names[0], STRATA_COLL_COUNT);
    for (int i = 0; i < STRATA_COLL_COUNT; i++) {
        assert_string_equal(strata_coll_name((strata_coll_t)i), names[i]);
        strata_coll_t got = STRATA_COLL_COUNT;
        assert_int_equal(strata_coll_parse(names[i], &got), STRATA_OK);
        assert_int_equal(got, i);
    }
    strata_coll_t got = STRATA_COLL_COUNT;
    assert_int_equal(strata_coll_parse("broadcast", &got), STRATA_OK);
    assert_int_equal(got, STRATA_COLL_BCAST);
    assert_int_equal(strata_coll_parse("AllReduce", &got), STRATA_OK);
    assert_int_equal(got, STRATA_COLL_ALLREDUCE);
    assert_int_equal(strata_coll_parse("all_reduce", &got), STRATA_ERR_INVALID_ARG);
    assert_non_null(strstr(strata_last_error(), "'all_reduce'"));
    assert_non_null(strstr(strata_last_error(), "allreduce reduce bcast reduce_scatter allgather "
                                                "alltoall gather scatter barrier"));
    assert_int_equal(strata_coll_parse(NULL, &got), STRATA_ERR_INVALID_ARG);
    assert_null(strata_coll_name(STRATA_COLL_COUNT));
}

/* ---- config from knobs ----------------------------------------------------------------------- */

static void test_config_default(void **state)
{
    (void)state;
    strata_comm_config_t cfg = strata_comm_config_default();
    assert_int_equal(cfg.rank, -1);
    assert_int_equal(cfg.nranks, -1);
    assert_null(cfg.store_addr);
    assert_null(cfg.job_id);
    assert_false(cfg.host_store);
    assert_false(cfg.force_tcp);
    assert_true(cfg.timeout_ms == 300000);
    assert_true(cfg.secret == NULL || cfg.secret[0] == '\0');

    set("STRATA_COMM_TIMEOUT_MS", "1500");
    set("STRATA_COMM_TRANSPORT", "tcp");
    set("STRATA_SECRET", "s3cret");
    set("STRATA_JOB_ID", "job-7");
    set("STRATA_STORE_ADDR", "10.1.2.3:4000");
    cfg = strata_comm_config_default();
    assert_true(cfg.timeout_ms == 1500);
    assert_true(cfg.force_tcp);
    assert_string_equal(cfg.secret, "s3cret");
    assert_string_equal(cfg.job_id, "job-7");
    assert_string_equal(cfg.store_addr, "10.1.2.3:4000");

    set("STRATA_COMM_TIMEOUT_MS", "-1");
    assert_true(strata_comm_config_default().timeout_ms < 0);
    set("STRATA_COMM_TIMEOUT_MS", "2K");
    assert_true(strata_comm_config_default().timeout_ms == 2048);
    // Malformed knobs cannot fail here: they warn and fall back to the defaults.
    set("STRATA_COMM_TIMEOUT_MS", "soon");
    set("STRATA_COMM_TRANSPORT", "carrier-pigeon");
    cfg = strata_comm_config_default();
    assert_true(cfg.timeout_ms == 300000);
    assert_false(cfg.force_tcp);
    assert_int_equal(cfg.ucx, STRATA_COMM_UCX_OFF);

    // The UCX settings: every peer, or only peers on other hosts; case does not matter.
    set("STRATA_COMM_TRANSPORT", "ucx");
    cfg = strata_comm_config_default();
    assert_int_equal(cfg.ucx, STRATA_COMM_UCX_ALL);
    assert_false(cfg.force_tcp);
    set("STRATA_COMM_TRANSPORT", "SHM+UCX");
    assert_int_equal(strata_comm_config_default().ucx, STRATA_COMM_UCX_HOSTS);
    set("STRATA_COMM_TRANSPORT", "tcp");
    assert_int_equal(strata_comm_config_default().ucx, STRATA_COMM_UCX_OFF);
}

/* ---- config from launchers ------------------------------------------------------------------- */

static void test_env_torchrun(void **state)
{
    (void)state;
    set("RANK", "3");
    set("WORLD_SIZE", "8");
    set("MASTER_ADDR", "10.0.0.1");
    set("MASTER_PORT", "1234");
    strata_comm_config_t cfg = from_env_ok();
    assert_int_equal(cfg.rank, 3);
    assert_int_equal(cfg.nranks, 8);
    assert_string_equal(cfg.store_addr, "10.0.0.1:1234");
    assert_false(cfg.host_store);
    assert_non_null(cfg.job_id);
    assert_true(strncmp(cfg.job_id, "p1234-", 6) == 0);
    assert_true(cfg.timeout_ms == 300000);
    assert_false(cfg.force_tcp);

    // Rank 0 hosts the store unless an external one serves it.
    set("RANK", "0");
    assert_true(from_env_ok().host_store);
    set("STRATA_STORE_EXTERNAL", "1");
    assert_false(from_env_ok().host_store);
    set("STRATA_STORE_EXTERNAL", "0");
    assert_true(from_env_ok().host_store);

    // MASTER_PORT defaults to 29500.
    unsetenv("MASTER_PORT");
    cfg = from_env_ok();
    assert_string_equal(cfg.store_addr, "10.0.0.1:29500");
    assert_true(strncmp(cfg.job_id, "p29500-", 7) == 0);

    // The job id depends on the host too, so jobs on different masters do not share segments.
    char first[64];
    snprintf(first, sizeof first, "%s", cfg.job_id);
    set("MASTER_ADDR", "10.0.0.2");
    assert_string_not_equal(from_env_ok().job_id, first);

    // IPv6 literal.
    set("MASTER_ADDR", "::1");
    assert_string_equal(from_env_ok().store_addr, "[::1]:29500");

    // STRATA_STORE_ADDR wins over MASTER_ADDR; knobs come through.
    set("STRATA_STORE_ADDR", "store.example:7000");
    set("STRATA_JOB_ID", "myjob");
    set("STRATA_SECRET", "hunter2");
    set("STRATA_COMM_TIMEOUT_MS", "-1");
    set("STRATA_COMM_TRANSPORT", "TCP");
    cfg = from_env_ok();
    assert_string_equal(cfg.store_addr, "store.example:7000");
    assert_string_equal(cfg.job_id, "myjob");
    assert_string_equal(cfg.secret, "hunter2");
    assert_true(cfg.timeout_ms < 0);
    assert_true(cfg.force_tcp);
}

static void test_env_slurm(void **state)
{
    (void)state;
    set("SLURM_PROCID", "5");
    set("SLURM_NTASKS", "16");
    set("MASTER_ADDR", "node001");
    strata_comm_config_t cfg = from_env_ok();
    assert_int_equal(cfg.rank, 5);
    assert_int_equal(cfg.nranks, 16);
    assert_string_equal(cfg.store_addr, "node001:29500");

    // Without MASTER_ADDR, inside a step: task 0's node (the step's first) and a port of the step:
    // its first reserved one, else one derived from the job and step ids.
    unsetenv("MASTER_ADDR");
    set("SLURM_JOB_ID", "4242");
    set("SLURM_STEP_ID", "3");
    set("SLURM_STEP_NODELIST", "gpu[007-009,012],cpu1");
    set("SLURM_STEP_RESV_PORTS", "12000-12003");
    cfg = from_env_ok();
    assert_string_equal(cfg.store_addr, "gpu007:12000");
    unsetenv("SLURM_STEP_RESV_PORTS");
    cfg = from_env_ok();
    char derived[64];
    snprintf(derived, sizeof derived, "%s", cfg.store_addr);
    int port = atoi(strchr(derived, ':') + 1);
    assert_true(strncmp(derived, "gpu007:", 7) == 0 && port >= 15000 && port < 32000);
    set("SLURM_STEP_ID", "4"); // another step of the job: another port
    assert_string_not_equal(from_env_ok().store_addr, derived);
    // --distribution=arbitrary: the hostfile's first line is task 0's node.
    char hf[] = "/tmp/test_env_hfXXXXXX";
    int fd = mkstemp(hf);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "n42\nn07\n", 8), 8);
    close(fd);
    set("SLURM_DISTRIBUTION", "arbitrary");
    set("SLURM_HOSTFILE", hf);
    assert_true(strncmp(from_env_ok().store_addr, "n42:", 4) == 0);
    unlink(hf);
    unsetenv("SLURM_DISTRIBUTION");
    unsetenv("SLURM_HOSTFILE");

    // Not in a step (SLURM_PROCID leaked into a process srun did not start): the error says what
    // to set, and who set what.
    unsetenv("SLURM_STEP_ID");
    EXPECT_ENV_ERROR("STRATA_STORE_ADDR", "MASTER_ADDR", "Slurm", "SLURM_PROCID");
}

/* The launchers' own meeting places: torchrun's agent store, PMIx, PMI-1. */
static void test_env_meeting_places(void **state)
{
    (void)state;
    set("RANK", "1");
    set("WORLD_SIZE", "2");
    set("MASTER_ADDR", "10.0.0.1");
    set("MASTER_PORT", "29400");
    set("TORCHELASTIC_USE_AGENT_STORE", "True");
    strata_comm_config_t cfg = from_env_ok();
    assert_string_equal(cfg.store_addr, "torch:10.0.0.1:29400");
    set("TORCHELASTIC_USE_AGENT_STORE", "False"); // a c10d rendezvous: the port is free for us
    assert_string_equal(from_env_ok().store_addr, "10.0.0.1:29400");

    clear_env(NULL);
    set("OMPI_COMM_WORLD_RANK", "1");
    set("OMPI_COMM_WORLD_SIZE", "2");
    set("PMIX_NAMESPACE", "327090177");
    set("PMIX_RANK", "1");
    cfg = from_env_ok();
    assert_string_equal(cfg.store_addr, "pmix:");
    assert_string_equal(cfg.job_id, "pmix");

    clear_env(NULL);
    set("PMI_RANK", "1");
    set("PMI_SIZE", "2");
    set("PMI_FD", "6");
    assert_string_equal(from_env_ok().store_addr, "pmi:");
    set("STRATA_STORE_ADDR", "h:7"); // an explicit address wins over every meeting place
    assert_string_equal(from_env_ok().store_addr, "h:7");
}

static void test_env_ompi_and_pmi(void **state)
{
    (void)state;
    set("OMPI_COMM_WORLD_RANK", "2");
    set("OMPI_COMM_WORLD_SIZE", "4");
    set("STRATA_STORE_ADDR", "h:1");
    strata_comm_config_t cfg = from_env_ok();
    assert_int_equal(cfg.rank, 2);
    assert_int_equal(cfg.nranks, 4);
    assert_string_equal(cfg.store_addr, "h:1");
    assert_true(strncmp(cfg.job_id, "p1-", 3) == 0);

    clear_env(NULL);
    set("PMI_RANK", "6");
    set("PMI_SIZE", "7");
    set("MASTER_ADDR", "head");
    cfg = from_env_ok();
    assert_int_equal(cfg.rank, 6);
    assert_int_equal(cfg.nranks, 7);
    assert_string_equal(cfg.store_addr, "head:29500");
    assert_false(cfg.host_store);
}

static void test_env_precedence(void **state)
{
    (void)state;
    set("MASTER_ADDR", "head");
    set("SLURM_PROCID", "1");
    set("SLURM_NTASKS", "2");
    set("PMI_RANK", "2");
    set("PMI_SIZE", "3");
    set("OMPI_COMM_WORLD_RANK", "3");
    set("OMPI_COMM_WORLD_SIZE", "4");
    set("RANK", "4");
    set("WORLD_SIZE", "5");
    assert_int_equal(from_env_ok().rank, 4); // torchrun / strata launch first
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    assert_int_equal(from_env_ok().rank, 3); // then Open MPI
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_int_equal(from_env_ok().rank, 2); // then MPICH
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    assert_int_equal(from_env_ok().rank, 1); // Slurm last: its variables leak into mpirun's ranks
}

static void test_env_missing(void **state)
{
    (void)state;
    strata_comm_config_t cfg;
    assert_int_equal(strata_comm_config_from_env(NULL), STRATA_ERR_INVALID_ARG);
    // No launcher at all: every variable pair looked for is listed.
    EXPECT_ENV_ERROR("RANK/WORLD_SIZE", "SLURM_PROCID/SLURM_NTASKS",
                     "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE", "PMI_RANK/PMI_SIZE");
    // Empty counts as unset.
    set("RANK", "");
    set("WORLD_SIZE", "");
    EXPECT_ENV_ERROR("RANK/WORLD_SIZE");
    // Half a pair.
    set("RANK", "1");
    EXPECT_ENV_ERROR("WORLD_SIZE", "RANK");
    unsetenv("RANK");
    set("OMPI_COMM_WORLD_SIZE", "4");
    EXPECT_ENV_ERROR("OMPI_COMM_WORLD_RANK");
    // A rank but no store.
    set("OMPI_COMM_WORLD_RANK", "1");
    EXPECT_ENV_ERROR("STRATA_STORE_ADDR", "MASTER_ADDR");
    set("MASTER_PORT", "5000");
    EXPECT_ENV_ERROR("MASTER_ADDR");
    set("MASTER_ADDR", "x");
    assert_int_equal(strata_comm_config_from_env(&cfg), STRATA_OK);
}

static void test_env_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *var, *value;
    } cases[] = {
        {"RANK", "abc"},
        {"RANK", "1x"},
        {"RANK", " 1"},
        {"RANK", "-1"},
        {"RANK", "8"},
        {"RANK", "99999999999999999999"},
        {"WORLD_SIZE", "0"},
        {"WORLD_SIZE", "-4"},
        {"WORLD_SIZE", "3000000000"},
        {"WORLD_SIZE", "8.0"},
        {"MASTER_PORT", "70000"},
        {"MASTER_PORT", "0"},
        {"MASTER_PORT", "http"},
        {"MASTER_ADDR", "bad host"},
        {"STRATA_STORE_ADDR", "nohostport"},
        {"STRATA_STORE_ADDR", "host:0"},
        {"STRATA_STORE_ADDR", "host:"},
        {"STRATA_STORE_ADDR", ":123"},
        {"STRATA_STORE_ADDR", "host:12ab"},
        {"STRATA_COMM_TIMEOUT_MS", "soon"},
        {"STRATA_COMM_TIMEOUT_MS", "-x"},
        {"STRATA_COMM_TRANSPORT", "ib"},
        {"STRATA_STORE_EXTERNAL", "maybe"},
        {"STRATA_JOB_ID", "a/b"},
        {"STRATA_JOB_ID", "0123456789012345678901234567890123456789012345678"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_env(NULL);
        set("RANK", "1");
        set("WORLD_SIZE", "8");
        set("MASTER_ADDR", "head");
        from_env_ok();
        set(cases[i].var, cases[i].value);
        EXPECT_ENV_ERROR(cases[i].var, cases[i].value);
    }
    // The same checks for the other launchers' variables.
    static const char *const pairs[][2] = {
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        clear_env(NULL);
        set("MASTER_ADDR", "head");
        set(pairs[i][0], "4");
        set(pairs[i][1], "4");
        EXPECT_ENV_ERROR(pairs[i][0], "4", pairs[i][1]); // rank == size is out of range
        set(pairs[i][0], "three");
        EXPECT_ENV_ERROR(pairs[i][0], "three");
        set(pairs[i][0], "3");
        set(pairs[i][1], "");
        EXPECT_ENV_ERROR(pairs[i][1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_names),
        cmocka_unit_test(test_dtype_parse_bad),
        cmocka_unit_test(test_op_names),
        cmocka_unit_test(test_coll_names),
        cmocka_unit_test_setup(test_config_default, clear_env),
        cmocka_unit_test_setup(test_env_torchrun, clear_env),
        cmocka_unit_test_setup(test_env_slurm, clear_env),
        cmocka_unit_test_setup(test_env_meeting_places, clear_env),
        cmocka_unit_test_setup(test_env_ompi_and_pmi, clear_env),
        cmocka_unit_test_setup(test_env_precedence, clear_env),
        cmocka_unit_test_setup(test_env_missing, clear_env),
        cmocka_unit_test_setup(test_env_malformed, clear_env),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    clear_env(NULL);
    return rc;
}
