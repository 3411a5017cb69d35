/* The helpers of common.h. */
#include "common.h"

#include "strata/sched.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

static char dir_path[256];

static void remove_dir(void)
{
    DIR *d = opendir(dir_path);
    if (d) {
        struct dirent *de;
        char p[512];
        while ((de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            snprintf(p, sizeof p, "%s/%s", dir_path, de->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir_path);
}

const char *fuzz_dir(void)
{
    if (!dir_path[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir_path, sizeof dir_path, "%s/strata-fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir_path)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    return dir_path;
}

const char *fuzz_file(const char *name, const void *data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror("fuzz: writing the scratch file");
        abort();
    }
    return path;
}

void fuzz_quiet(void)
{
    setenv("STRATA_LOG", "error", 1);
}

struct strata_cluster *fuzz_small_cluster(void)
{
    static strata_cluster_t c;
    static bool built;
    static const char conf[] = "SwitchName=leaf1 Nodes=n[01-04]\n"
                               "SwitchName=leaf2 Nodes=n[05-08]\n"
                               "SwitchName=leaf3 Nodes=n[09-10]\n"
                               "SwitchName=leaf4 Nodes=n[11-16]\n"
                               "SwitchName=spine1 Switches=leaf[1-2]\n"
                               "SwitchName=spine2 Switches=leaf[3-4]\n"
                               "SwitchName=core Switches=spine[1-2]\n";
    if (!built) {
        strata_slurm_topo_t st;
        if (strata_slurm_topo_parse(conf, "fuzz", &st) < 0 ||
            strata_cluster_from_slurm(&st, NULL, 4, &c) < 0) {
            fprintf(stderr, "fuzz: %s\n", strata_last_error());
            abort();
        }
        strata_slurm_topo_free(&st);
        built = true;
    }
    return &c;
}
