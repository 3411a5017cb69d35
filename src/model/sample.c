/* Sampling the next token from a row of logits (strata/model.h): greedy at temperature 0, else a
 * draw from softmax(logits / temperature) with the model's deterministic random stream. */
#include <math.h>

#include "model/gpt_internal.h"

int strata_sample_token(const float *logits, int vocab, double temperature, uint64_t *rng)
{
    int next = 0;
    if (temperature <= 0) {
        for (int i = 1; i < vocab; i++)
            next = logits[i] > logits[next] ? i : next;
        return next;
    }
    float mx = logits[0];
    for (int i = 1; i < vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0; // two passes over exp() instead of a buffer: the same floats both times
    for (int i = 0; i < vocab; i++)
        sum += expf((logits[i] - mx) / (float)temperature);
    double u = (double)(st_splitmix(rng) >> 11) * 0x1.0p-53 * sum, acc = 0;
    for (int i = 0; i < vocab; i++) {
        acc += expf((logits[i] - mx) / (float)temperature);
        if (u < acc)
            return i;
    }
    return vocab - 1;
}
