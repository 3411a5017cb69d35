/* The training configuration as checkpoint metadata (strata_train_config_to_json): it must read
 * back whatever the configuration file held. An hpz level name with a quote was written raw, so the
 * stored configuration was not JSON and a checkpoint's model could not be recovered from it (found
 * by fuzzing the configuration reader's round trip). */
#include "harness/st_test.h"
#include "strata/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_stored_config_reads_back(void **state)
{
    (void)state;
    strata_train_config_t c = strata_train_config_default(), back = strata_train_config_default();
    snprintf(c.hpz, sizeof c.hpz, "ra\"ck\\1");
    c.batch = 3;
    c.bf16_grads = true; // --grad-dtype bf16: a checkpoint records how its gradients were reduced
    char text[4096];
    assert_true(strata_train_config_to_json(&c, text, sizeof text) > 0);
    char path[] = "/tmp/strata-train-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    if (strata_train_config_load(path, &back) != STRATA_OK)
        fail_msg("%s\n%s", strata_last_error(), text);
    unlink(path);
    assert_string_equal(back.hpz, c.hpz);
    assert_int_equal(back.batch, 3);
    assert_true(back.bf16_grads);
    // The model field by field, through its JSON form (the structs' padding is nobody's).
    char want[1024], got[1024];
    assert_true(strata_gpt_config_to_json(&c.model, want, sizeof want) > 0);
    assert_true(strata_gpt_config_to_json(&back.model, got, sizeof got) > 0);
    assert_string_equal(got, want);
}

/* "grad_dtype" takes fp32 or bf16; anything else is refused at its line. */
static void test_grad_dtype_refused(void **state)
{
    (void)state;
    char path[] = "/tmp/strata-train-config-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "{\"zero\": 2,\n \"grad_dtype\": \"int8\"}\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    strata_train_config_t c = strata_train_config_default();
    strata_status_t rc = strata_train_config_load(path, &c);
    char want[64];
    snprintf(want, sizeof want, "%s:2:", path);
    unlink(path);
    assert_int_equal(rc, STRATA_ERR_PARSE);
    if (!strstr(strata_last_error(), want) || !strstr(strata_last_error(), "fp32 or bf16"))
        fail_msg("message: %s", strata_last_error());
    assert_false(c.bf16_grads);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stored_config_reads_back),
        cmocka_unit_test(test_grad_dtype_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
