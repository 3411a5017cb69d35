/* What the fuzz targets share: the libFuzzer entry points, a NUL-terminated copy of an input, a
 * scratch file holding an input for readers that take a path, and an invariant check.
 *
 * A target is one file, fuzz_<name>.c, defining LLVMFuzzerTestOneInput (and, if it needs set-up,
 * LLVMFuzzerInitialize). It feeds the input to one parser and, when the parser accepts it, to what
 * the strata command does next with the result (a write-back that must read again, a placement, a
 * forward pass), so that values a parser lets through are exercised too. A target never treats a
 * refused input as a failure: only a crash, a sanitizer report or a broken FUZZ_CHECK is one. */
#ifndef ST_FUZZ_COMMON_H
#define ST_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A malloc'd copy of the input with a NUL after it (the caller frees it). */
char *fuzz_cstr(const uint8_t *data, size_t size);

/* The per-process scratch directory (created on first use, removed at exit). */
const char *fuzz_dir(void);

/* Writes the input to fuzz_dir()/name and returns that path (static storage, valid until the
 * next call). */
const char *fuzz_file(const char *name, const void *data, size_t size);

/* The cluster of data/sched/topology.conf (16 hosts of 4 accelerators in irregular leaves, two
 * spines, one core; host names n01..n16), built once; callers may change host states. */
struct strata_cluster;
struct strata_cluster *fuzz_small_cluster(void);

/* Logging at error level only: the store logs every refused client at warn. Call from
 * LLVMFuzzerInitialize, before strata logs anything. */
void fuzz_quiet(void);

/* A broken invariant of a parser (a written file that does not read back, a message-less error):
 * a finding, reported like a crash. */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
