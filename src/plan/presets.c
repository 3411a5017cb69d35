/* Built-in presets: models (the Megatron-LM paper's 1.7B-1T family, GPT-3, MT-NLG, Llama 2/3,
 * MegaScale's 175B), accelerators (A100, H100, H200, MI250X GCD, this machine's CPU) and the
 * calibration constants. Sources of every number are in docs/plan.md; data/presets/ holds the same
 * presets as JSON files, and a unit test keeps the two in step. */
#include "base/base.h"
#include "plan/plan_internal.h"

#include <stdio.h>
#include <string.h>

/* ---- models ------------------------------------------------------------------------------------
 */

typedef struct model_preset {
    const char *name;
    int layers, hidden, heads, kv_heads, ffn, vocab, seq;
    bool llama; /* SwiGLU, RMSNorm, no biases, untied, rotary, no dropout */
} model_preset_t;

static const model_preset_t models[] = {
    // Narayanan et al., SC'21, Table 1 (vocabulary 51,200, sequence 2,048).
    {"megatron-1.7b", 24, 2304, 24, 24, 4 * 2304, 51200, 2048, false},
    {"megatron-3.6b", 30, 3072, 32, 32, 4 * 3072, 51200, 2048, false},
    {"megatron-7.5b", 36, 4096, 32, 32, 4 * 4096, 51200, 2048, false},
    {"megatron-18.4b", 40, 6144, 48, 48, 4 * 6144, 51200, 2048, false},
    {"megatron-39.1b", 48, 8192, 64, 64, 4 * 8192, 51200, 2048, false},
    {"megatron-76.1b", 60, 10240, 80, 80, 4 * 10240, 51200, 2048, false},
    {"megatron-145.6b", 80, 12288, 96, 96, 4 * 12288, 51200, 2048, false},
    {"megatron-310.1b", 96, 16384, 128, 128, 4 * 16384, 51200, 2048, false},
    {"megatron-529.6b", 105, 20480, 128, 128, 4 * 20480, 51200, 2048, false},
    {"megatron-1t", 128, 25600, 160, 160, 4 * 25600, 51200, 2048, false},
    // GPT-3 175B as Megatron-LM trains it (Table 2: 174.6B with the padded vocabulary).
    {"gpt3-175b", 96, 12288, 96, 96, 4 * 12288, 51200, 2048, false},
    // MT-NLG 530B (Smith et al. 2022): 105 layers, hidden 20480, 128 heads.
    {"mt-nlg-530b", 105, 20480, 128, 128, 4 * 20480, 51200, 2048, false},
    // MegaScale's 175B (Jiang et al. 2024, Table 1): 128 heads, vocabulary 64,000.
    {"megascale-175b", 96, 12288, 128, 128, 4 * 12288, 64000, 2048, false},
    // Small models for strata's own CPU runs: byte-level tokens (vocabulary 256), and GPT-2 small.
    {"strata-tiny", 4, 256, 4, 4, 4 * 256, 256, 256, false},
    {"gpt2-124m", 12, 768, 12, 12, 4 * 768, 50304, 1024, false},
    // Llama 2 (Touvron et al. 2023) and Llama 3 (Dubey et al. 2024).
    {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, true},
    {"llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, true},
    {"llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, true},
    {"llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, true},
    {"llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, true},
    {"llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, true},
};

int strata_model_preset_count(void)
{
    return (int)(sizeof models / sizeof models[0]);
}

const char *strata_model_preset_name(int i)
{
    return i >= 0 && i < strata_model_preset_count() ? models[i].name : NULL;
}

static strata_status_t unknown(const char *what, const char *name, int n,
                               const char *(*name_at)(int))
{
    char list[1024] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", name_at(i));
        if (w < 0 || (size_t)w >= sizeof list - used)
            break;
        used += (size_t)w;
    }
    return st_error(STRATA_ERR_INVALID_ARG,
                    "unknown %s preset '%s' (expected one of: %s, or a "
                    "file ending in .json)",
                    what, name, list);
}

strata_status_t strata_model_preset(const char *name, strata_model_t *out)
{
    for (int i = 0; i < strata_model_preset_count(); i++) {
        const model_preset_t *p = &models[i];
        if (strcmp(p->name, name))
            continue;
        *out = strata_model_gpt(p->name, p->layers, p->hidden, p->heads, p->vocab, p->seq);
        out->kv_heads = p->kv_heads;
        out->ffn = p->ffn;
        if (p->llama) {
            out->mlp = STRATA_MLP_SWIGLU;
            out->rmsnorm = true;
            out->bias = false;
            out->tied_embeddings = false;
            out->learned_pos = false;
            out->dropout = false;
        }
        return STRATA_OK;
    }
    return unknown("model", name, strata_model_preset_count(), strata_model_preset_name);
}

/* ---- accelerators ------------------------------------------------------------------------------
 */

#define GiB (1024.0 * 1024.0 * 1024.0)

/* Fields: name, peak 16-bit, peak fp32, memory, bandwidth, large-GEMM efficiency, shape constant,
 * reserved memory, kernel floor, peak FP8 (0 = none), large FP8 GEMM efficiency, SMs, GEMM tile. */
static const strata_accel_t accels[] = {
    // A100 SXM: 312 TFLOP/s dense fp16/bf16, 19.5 TFLOP/s fp32; HBM2 1,555 GB/s (40 GB) or
    // HBM2e 2,039 GB/s (80 GB). Large cuBLAS GEMMs reach about 85% of peak. 108 SMs; cuBLAS's
    // large Ampere kernels compute 256 x 128 output tiles. No FP8.
    {"a100-40gb", 312e12, 19.5e12, 40 * GiB, 1.555e12, 0.85, 96, 2 * GiB, 4e-6, 0, 0, 108, 256,
     128},
    {"a100-80gb", 312e12, 19.5e12, 80 * GiB, 2.039e12, 0.85, 96, 2 * GiB, 4e-6, 0, 0, 108, 256,
     128},
    // H100 SXM5: 989 TFLOP/s dense bf16, 1,979 FP8, 67 fp32, 80 GB HBM3 at 3.35 TB/s; large GEMMs
    // reach about 75% of peak in bf16 and 70% in FP8 (power and clock limited) and need larger
    // shapes to saturate. 132 SMs; cuBLAS's Hopper kernels compute 128 x 256 tiles.
    {"h100-sxm", 989e12, 67e12, 80 * GiB, 3.35e12, 0.75, 160, 2 * GiB, 4e-6, 1979e12, 0.70, 132,
     128, 256},
    // H200: H100's compute with 141 GB HBM3e at 4.8 TB/s.
    {"h200", 989e12, 67e12, 141e9, 4.8e12, 0.77, 160, 2 * GiB, 4e-6, 1979e12, 0.72, 132, 128, 256},
    // One GCD of an MI250X (Frontier's unit of scheduling): 191.5 TFLOP/s bf16, 47.9 TFLOP/s fp32
    // matrix, 64 GB HBM2e at 1.6 TB/s; rocBLAS reaches about 70% of peak on large GEMMs. 110 CUs;
    // 256 x 128 macro tiles (an assumption). No FP8.
    {"mi250x-gcd", 191.5e12, 47.9e12, 64 * GiB, 1.6e12, 0.70, 128, 2 * GiB, 6e-6, 0, 0, 110, 256,
     128},
    // The development machine's CPU as one rank per core, measured by `strata plan calibrate-cpu`
    // (OpenBLAS sgemm on one thread: 47-71 GFLOP/s over runs on a shared 2-core machine; memcpy
    // 16-28 GB/s; half of the RAM per rank); bf16 is not faster than fp32 here. Re-measure on
    // another machine and pass the file with --accel. No waves: one core, no tiles to fill.
    {"cpu", 66e9, 66e9, 11.77 * GiB, 20e9, 1.0, 8, 0, 2e-6, 0, 0, 0, 0, 0},
};

int strata_accel_preset_count(void)
{
    return (int)(sizeof accels / sizeof accels[0]);
}

const char *strata_accel_preset_name(int i)
{
    return i >= 0 && i < strata_accel_preset_count() ? accels[i].name : NULL;
}

strata_status_t strata_accel_preset(const char *name, strata_accel_t *out)
{
    for (int i = 0; i < strata_accel_preset_count(); i++)
        if (!strcmp(accels[i].name, name)) {
            *out = accels[i];
            return STRATA_OK;
        }
    return unknown("accelerator", name, strata_accel_preset_count(), strata_accel_preset_name);
}

/* ---- calibration -------------------------------------------------------------------------------
 */

strata_calib_t strata_calib_default(void)
{
    // eta_gemm, eta_mem, eta_zero3 and zero3_overlap_cost fitted by `strata plan calibrate` on
    // data/validation/megatron_sc21_*.csv. Fixed, from measurements outside those tables: eta_up
    // (NCCL all-reduce bus bandwidth ~235 of 300 GB/s on DGX A100 NVLink), eta_out (~170 of 200
    // GB/s per 8-rail node), overlap_cost (typical slowdown of kernels sharing the GPU with NCCL),
    // straggler_cv (spread of accelerator speeds in a cluster), ecmp_subflows (hashed sub-flows
    // per connection), mem_frag (allocator slack). docs/plan.md explains each.
    return (strata_calib_t){.eta_gemm = 0.8883,
                            .eta_mem = 0.8622,
                            .eta_up = 0.78,
                            .eta_out = 0.85,
                            .eta_zero3 = 0.1240,
                            .overlap_cost = 0.10,
                            .zero3_overlap_cost = 0.4422,
                            .straggler_cv = 0.01,
                            .ecmp_subflows = 16,
                            .mem_frag = 0.05};
}

static const char *const calib_names[STRATA_CALIB_NPARAMS] = {
    "eta_gemm",           "eta_mem",      "eta_up",        "eta_out", "eta_zero3", "overlap_cost",
    "zero3_overlap_cost", "straggler_cv", "ecmp_subflows", "mem_frag"};

void strata_calib_param_range(int i, double *lo, double *hi)
{
    // Efficiencies and costs are fractions (up to 2 so that a what-if can exceed a measurement);
    // 0 sub-flows switches ECMP collisions off. The compute, memory and link efficiencies (the
    // first four) divide a rate: at 0 a step would cost infinite time (and inf - inf, NaN), so
    // they start at 0.01.
    *lo = i <= 3 ? 0.01 : 0;
    *hi = i == 8 ? 4096 : i == 7 || i == 9 ? 1 : 2;
}

const char *strata_calib_param_name(int i)
{
    return i >= 0 && i < STRATA_CALIB_NPARAMS ? calib_names[i] : NULL;
}

double *strata_calib_param(strata_calib_t *c, int i)
{
    switch (i) {
    case 0:
        return &c->eta_gemm;
    case 1:
        return &c->eta_mem;
    case 2:
        return &c->eta_up;
    case 3:
        return &c->eta_out;
    case 4:
        return &c->eta_zero3;
    case 5:
        return &c->overlap_cost;
    case 6:
        return &c->zero3_overlap_cost;
    case 7:
        return &c->straggler_cv;
    case 8:
        return &c->ecmp_subflows;
    case 9:
        return &c->mem_frag;
    default:
        return NULL;
    }
}

strata_status_t strata_calib_apply(strata_calib_t *c, const char *assignments)
{
    const char *p = assignments;
    while (*p) {
        size_t len = strcspn(p, ",");
        char item[96];
        if (len >= sizeof item)
            return st_error(STRATA_ERR_INVALID_ARG, "calibration override too long: '%s'", p);
        memcpy(item, p, len);
        item[len] = 0;
        char *eq = strchr(item, '=');
        double v;
        char extra;
        if (!eq || sscanf(eq + 1, "%lf%c", &v, &extra) != 1)
            return st_error(STRATA_ERR_INVALID_ARG,
                            "expected name=value in calibration override, "
                            "got '%s'",
                            item);
        *eq = 0;
        int found = -1;
        for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
            if (!strcmp(item, calib_names[i]))
                found = i;
        if (found < 0) {
            char names[256] = "";
            for (int i = 0; i < STRATA_CALIB_NPARAMS; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                         calib_names[i]);
            return st_error(STRATA_ERR_INVALID_ARG,
                            "unknown calibration constant '%s' (expected one of %s)", item, names);
        }
        double lo, hi;
        strata_calib_param_range(found, &lo, &hi);
        if (!(v >= lo && v <= hi))
            return st_error(STRATA_ERR_INVALID_ARG, "expected %s in [%g, %g], got %g", item, lo, hi,
                            v);
        *strata_calib_param(c, found) = v;
        p += len;
        if (*p == ',')
            p++;
    }
    return STRATA_OK;
}
