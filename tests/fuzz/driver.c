/* A main for the fuzz targets in builds without libFuzzer: runs LLVMFuzzerTestOneInput once on
 * every file named on the command line or found in a directory named there (sorted by name, dot
 * files skipped), so ctest replays the committed corpus and regression inputs in the release and
 * asan builds. Arguments starting with '-' (libFuzzer's flags) are ignored, so one command line
 * serves both builds. A missing path is an error: a renamed directory must not pass silently. */
#include "common.h"

#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return -1;
    }
    // An exact-size copy, so ASan sees a read past the input's end.
    uint8_t *in = malloc(n ? n : 1);
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int no_dot(const struct dirent *d)
{
    return d->d_name[0] != '.';
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    int ran = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) < 0)
                return 1;
            ran++;
            continue;
        }
        struct dirent **ents;
        int n = scandir(argv[i], &ents, no_dot, by_name);
        if (n < 0) {
            perror(argv[i]);
            return 1;
        }
        for (int k = 0; k < n; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], ents[k]->d_name);
            fprintf(stderr, "%s\n", path);
            if (run_file(path) < 0)
                return 1;
            ran++;
            free(ents[k]);
        }
        free(ents);
    }
    printf("%s: %d inputs ran\n", argv[0], ran);
    return 0;
}
