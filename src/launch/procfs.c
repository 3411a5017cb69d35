/* What the launcher learns from the system about its ranks after a failure: which ones are stopped
 * (read from /proc, the only place a stopped process shows: it neither exits nor answers), and
 * which shared-memory names a job left behind in /dev/shm. Linux only, like the rest of launch.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch/launch_internal.h"

/* State and process group of /proc/<pid>/stat ("pid (comm) S ppid pgrp ..."); false if gone. */
static bool read_stat(const char *pid, char *state, pid_t *pgrp)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); // the command name may contain anything, even ") "
    int ppid, pg;
    if (!p || sscanf(p + 1, " %c %d %d", state, &ppid, &pg) != 3)
        return false;
    *pgrp = pg;
    return true;
}

void st_launch_find_stopped(const pid_t *pgids, int n, bool *stopped)
{
    for (int i = 0; i < n; i++)
        stopped[i] = false;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char state;
        pid_t pg;
        // 'T' only: stopped by a signal (SIGSTOP, SIGTSTP). 't' is a ptrace stop, which a rank
        // also shows for a moment on its way out when LeakSanitizer's tracer inspects it; a rank
        // held by a debugger is found by the survivors' census instead.
        if (!read_stat(de->d_name, &state, &pg) || state != 'T')
            continue;
        // Stopped processes are rare: a linear search over the groups costs nothing in practice.
        for (int i = 0; i < n; i++)
            if (pgids[i] > 0 && pgids[i] == pg)
                stopped[i] = true;
    }
    closedir(d);
}

int st_launch_remove_shm(const char *job_id)
{
    char prefix[128];
    int plen = snprintf(prefix, sizeof prefix, "strata-%s-", job_id);
    if (plen <= 0 || (size_t)plen >= sizeof prefix || !*job_id)
        return 0;
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int fd = dirfd(d), removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (!strncmp(de->d_name, prefix, (size_t)plen) && unlinkat(fd, de->d_name, 0) == 0)
            removed++;
    closedir(d);
    return removed;
}
