/* What the two checkpoint files share (internal to src/train): the crc32, the "sealed" checksum
 * field (a checksum stored inside the text it covers, computed as if its own 8 hex digits were
 * '0'), the atomic file write and the name of its temporary file, and the metadata limits. The one-
 * file format is checkpoint.c, a step of a run (manifest, assembly, pruning) is ckpt_step.c. */
#ifndef ST_TRAIN_CKPT_INTERNAL_H
#define ST_TRAIN_CKPT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "strata/status.h"
#include "strata/train.h"

/* Steps, element counts and offsets read back must lie in [0, ST_CKPT_INT_MAX] (2^53: exact in a
 * double, far beyond any run). */
#define ST_CKPT_INT_MAX ((int64_t)1 << 53)
#define ST_CKPT_RANKS_MAX (1 << 20)

/* zlib's crc32, continued from crc (0 to start). */
uint32_t st_crc32(uint32_t crc, const void *buf, size_t n);

/* The checksum of prefix[0..np) + text[0..n) with the 8 characters after the one occurrence of
 * "<key>":" in text counted as '0'. *at receives the offset of those 8 characters in text. Returns
 * false when the field is absent, occurs twice or has no room for 8 characters. */
bool st_ckpt_sealed_crc(const void *prefix, size_t np, const char *text, size_t n, const char *key,
                        uint32_t *crc, size_t *at);

/* Writes the 8 digits of crc at text + at. */
void st_ckpt_put_crc(char *text, size_t at, uint32_t crc);

/* Parses exactly 8 lowercase hex digits. */
bool st_ckpt_parse_crc(const char *s, uint32_t *out);

/* True with *out when v is a JSON integer in [lo, hi] (false for NULL, another type, or out of
 * range), for every number a checkpoint or manifest holds. */
bool st_ckpt_json_int(json_object *v, int64_t lo, int64_t hi, int64_t *out);

/* Writes the concatenation of n buffers to path atomically: a temporary file beside it
 * (st_ckpt_tmp_name), [fsync,] rename[, fsync of the directory]; the temporary is removed on
 * failure.
 * `durable` asks for the fsyncs: a disk checkpoint must survive the host; a memory checkpoint
 * (tmpfs) needs only to survive the process, which the rename alone gives on any file system.
 * Errors: STRATA_ERR_IO naming the file and the system's reason (e.g. "No space left on device"). */
strata_status_t st_ckpt_write_atomic(const char *path, const void *const *bufs, const size_t *lens,
                                     int n, bool durable);

/* strata_ckpt_write and strata_ckpt_commit (which are these with durable = true, no pieces).
 * `pieces` (npieces of them, may be 0) go into __metadata__ as "tensors" (ckpt_pieces.c). */
strata_status_t st_ckpt_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                              const strata_ckpt_meta_t *meta, const strata_ckpt_piece_t *pieces,
                              int npieces, strata_ckpt_digest_t *digest, bool durable);
/* A plain safetensors file for other tools (durably, atomically): the tensors, and __metadata__
 * from `meta`, key and value strings alternating up to a NULL (may be NULL); no checksums. A
 * non-finite value is refused (STRATA_ERR_INVALID_ARG naming the tensor). */
strata_status_t st_safetensors_write(const char *path, const strata_ckpt_tensor_t *t, int n,
                                     const char *const *meta);

/* The "tensors" record: the JSON text of n pieces (malloc'd; NULL when out of memory), and its
 * parse (names strdup'd; free with st_ckpt_pieces_free). Errors: STRATA_ERR_PARSE naming path. */
char *st_ckpt_pieces_json(const strata_ckpt_piece_t *p, int n);
strata_status_t st_ckpt_pieces_parse(const char *text, const char *path, strata_ckpt_piece_t **out,
                                     int *n);
void st_ckpt_pieces_free(strata_ckpt_piece_t *p, int n);
strata_status_t st_ckpt_commit(const char *dir, const strata_ckpt_manifest_t *m, bool durable);

/* Removes every checkpoint file of every step of dir but `step`, older or newer, committed or left
 * over (manifests first, so a step stops existing before its shards go); temporaries stay (see
 * strata_ckpt_clean_tmp). The pruning of a memory directory, which holds one step of one job.
 * Returns the files removed. */
int st_ckpt_keep_only(const char *dir, int64_t step);

/* The temporary file of a writer: <path>.tmp.<pid>.<host>, so a later run can tell whether its writer
 * is still alive (same host, live pid). */
void st_ckpt_tmp_name(const char *path, char *out, size_t size);

#endif
