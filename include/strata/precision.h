/* The arithmetic precision of training, one type for every part that speaks of it: the planner
 * models each (plan.h, docs/plan.md), the CPU engine computes in FP32 or BF16 (model.h,
 * strata_blas_set_precision; docs/train.md). Names as on the command line: "bf16", "fp16",
 * "fp32", "fp8". */
#ifndef STRATA_PRECISION_H
#define STRATA_PRECISION_H

#include "strata/status.h"

typedef enum strata_precision {
    STRATA_PREC_BF16 = 0, /* bf16 compute, fp32 master weights */
    STRATA_PREC_FP16,     /* fp16 compute, fp32 master weights, loss scaling */
    STRATA_PREC_FP32,     /* fp32 everything */
    STRATA_PREC_FP8,      /* the linear layers' GEMMs in FP8 (transformer-engine style: inputs cast
                             to e4m3/e5m2 with per-tensor scales, their saved inputs kept in FP8,
                             an FP8 copy of the weights); attention, norms, communication and
                             gradients in bf16, fp32 master weights. Needs peak_flops_8. */
} strata_precision_t;

/* The name above, or "?" for a value outside the enum. */
STRATA_API const char *strata_precision_name(strata_precision_t p);

/* Parses a name. Errors: STRATA_ERR_INVALID_ARG listing the valid names. */
STRATA_API strata_status_t strata_precision_parse(const char *s, strata_precision_t *out);

#endif
