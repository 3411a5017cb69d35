/* Checkpoint headers that lie about their tensors (found by fuzzing strata_ckpt_open): a shape
 * whose element count wraps around size_t matched the byte count it was checked against, so a
 * file with no data was accepted with a tensor of 2^64 floats. Written by hand: the data section is
 * empty, so its crc32 is 00000000. */
#include "harness/st_test.h"
#include "strata/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static strata_status_t open_header(const char *json, strata_ckpt_t **ck)
{
    char path[] = "/tmp/strata-ckpt-header-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(json);
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((unsigned long long)n >> (8 * i));
    assert_int_equal(write(fd, len, 8), 8);
    assert_int_equal(write(fd, json, n), (ssize_t)n);
    close(fd);
    strata_status_t rc = strata_ckpt_open(path, ck);
    unlink(path);
    return rc;
}

static void test_wrapping_shape(void **state)
{
    (void)state;
    strata_ckpt_t *ck;
    const char *meta = "\"__metadata__\":{\"format\":\"strata\",\"crc32\":\"00000000\"}";
    char json[512];
    snprintf(json, sizeof json, "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},%s}",
             meta);
    assert_int_equal(open_header(json, &ck), STRATA_OK); // an empty tensor is fine
    strata_ckpt_close(ck);
    snprintf(json, sizeof json,
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
             "\"data_offsets\":[0,0]},%s}",
             meta);
    assert_int_equal(open_header(json, &ck), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "'t' has a shape too large"));
    snprintf(json, sizeof json,
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,0],"
             "\"data_offsets\":[0,0]},%s}",
             meta);
    assert_int_equal(open_header(json, &ck), STRATA_ERR_PARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapping_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
