/* Fuzz target: training configurations (src/train/config.c, strata_train_config_load, whose
 * "model" section goes through src/model/config.c, strata_gpt_config_from_json). An accepted
 * configuration must be storable as checkpoint metadata (strata_train_config_to_json) and that
 * text must read again, as `strata train --config FILE` and a later `--resume` do. */
#include "common.h"

#include "strata/model.h"
#include "strata/train.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("train.json", data, size);
    strata_train_config_t c = strata_train_config_default();
    if (strata_train_config_load(path, &c) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        return 0;
    }
    strata_gpt_config_t g = c.model;
    if (strata_gpt_config_validate(&g) == STRATA_OK)
        FUZZ_CHECK(strata_gpt_config_nparams(&g) > 0);
    static strata_ckpt_meta_t meta; // the checkpoint's room for it
    if (strata_train_config_to_json(&c, meta.config, sizeof meta.config) < 0)
        return 0;
    path = fuzz_file("stored.json", meta.config, strlen(meta.config));
    strata_train_config_t back = strata_train_config_default();
    if (strata_train_config_load(path, &back) < 0) {
        fprintf(stderr, "stored, refused: %s\n", strata_last_error());
        FUZZ_CHECK(!"a stored configuration reads back");
    }
    FUZZ_CHECK(back.batch == c.batch && back.seq == c.seq && back.steps == c.steps);
    // Field by field, through the model's JSON form: a byte comparison of the structs would read
    // their padding, which nothing sets.
    char want[1024], got[1024];
    FUZZ_CHECK(strata_gpt_config_to_json(&c.model, want, sizeof want) > 0);
    FUZZ_CHECK(strata_gpt_config_to_json(&back.model, got, sizeof got) > 0);
    FUZZ_CHECK(!strcmp(want, got));
    return 0;
}
