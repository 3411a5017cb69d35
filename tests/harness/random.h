/* Reproducible random test data: a xorshift64 generator whose state the test keeps, so each test
 * draws the same numbers on every run and machine, whatever other tests draw. */
#ifndef ST_TEST_RANDOM_H
#define ST_TEST_RANDOM_H

#include <stdint.h>

/* The next float of *state (nonzero), uniform in [-1, 1). */
float st_test_uniform(uint64_t *state);

#endif
