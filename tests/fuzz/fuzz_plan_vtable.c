/* Fuzz target: validation tables (src/plan/validate.c, strata_vtable_load: the CSV files of
 * data/validation/). Each accepted row is predicted, and a small table is fitted, as
 * `strata plan validate FILE` does. */
#include "common.h"

#include "strata/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file("table.csv", data, size);
    strata_vtable_t t = {0};
    if (strata_vtable_load(path, &t) < 0) {
        FUZZ_CHECK(strata_last_error()[0]);
        strata_vtable_free(&t);
        return 0;
    }
    strata_calib_t calib = strata_calib_default();
    for (int i = 0; i < t.nrows; i++) {
        double v;
        strata_vrow_predict(&t.rows[i], &calib, &v, NULL);
    }
    if (t.nrows <= 2) {
        strata_calib_t fit;
        double mape;
        strata_calib_fit(&t, -1, STRATA_CALIB_FIT_DEFAULT, &calib, &fit, &mape);
    }
    strata_vtable_free(&t);
    return 0;
}
