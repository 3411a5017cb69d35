/* Checkpoint headers that lie about their tensors (found by fuzzing strata_ckpt_open): a shape
 * whose element count wraps around size_t matched the byte count it was checked against, so a
 * file with no data was accepted with a tensor of 2^64 floats. Written by hand: the data section is
 * empty, so its crc32 is 00000000; the header is sealed (header_crc32) as the writer seals it. */
#include "harness/st_test.h"
#include "strata/train.h"
#include "train/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static strata_status_t open_header(char *json, strata_ckpt_t **ck)
{
    char path[] = "/tmp/strata-ckpt-header-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t n = strlen(json);
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((unsigned long long)n >> (8 * i));
    uint32_t crc;
    size_t at;
    assert_true(st_ckpt_sealed_crc(len, 8, json, n, "header_crc32", &crc, &at));
    st_ckpt_put_crc(json, at, crc);
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
    const char *meta = "\"__metadata__\":{\"format\":\"strata\",\"step\":\"1\",\"crc32\":\"00000000\","
                       "\"header_crc32\":\"00000000\"}";
    char json[512];
    snprintf(json, sizeof json, "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},%s}",
             meta);
    strata_status_t rc = open_header(json, &ck);
    if (rc != STRATA_OK)
        fail_msg("an empty tensor: %s", strata_last_error());
    strata_ckpt_close(ck);
    snprintf(json, sizeof json,
             "{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
             "\"data_offsets\":[0,0]},%s}",
             meta);
    assert_int_equal(open_header(json, &ck), STRATA_ERR_PARSE);
    assert_non_null(strstr(strata_last_error(), "tensor 't' has a shape that"));
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
