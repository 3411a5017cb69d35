/* Internal to src/launch: what the process manager asks of the system (procfs.c) and its output
 * streams (output.c). */
#ifndef ST_LAUNCH_INTERNAL_H
#define ST_LAUNCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <sched.h>
#include <sys/types.h>

/* ---- procfs.c ---- */

/* Sets stopped[i] when a process of process group pgids[i] is stopped by a signal (state T:
 * SIGSTOP, SIGTSTP); one pass over /proc. pgids[i] <= 0 is skipped. */
void st_launch_find_stopped(const pid_t *pgids, int n, bool *stopped);

/* Removes the job's shared-memory names, /dev/shm/strata-<job_id>-* (doorbells and segments a
 * rank that died could not unlink). Returns how many were removed. */
int st_launch_remove_shm(const char *job_id);

/* ---- output.c: rank output, whole lines, optionally prefixed "[r<rank>] " ---- */

#define ST_LAUNCH_READ_CHUNK 65536

struct st_stream;

/* Output buffer for one destination fd; flushed whenever a line would not fit, and after each
 * read, so a line is never split across a write that another line could get in between. */
typedef struct st_outbuf {
    int fd;
    bool broken; /* EPIPE or another write error: drop output from now on */
    bool live;   /* a terminal: a line a rank redraws with '\r' (a progress bar) goes out as it
                    comes, each redraw prefixed again */
    struct st_stream *open; /* the stream whose line is out without its newline, or NULL */
    size_t len;
    char data[ST_LAUNCH_READ_CHUNK * 2];
} st_outbuf_t;

/* One rank's stdout or stderr pipe, read end. A partial line waits in buf until its newline, except
 * on a live destination once the line has been redrawn ('\r'): then its text goes out at once. */
typedef struct st_stream {
    int fd; /* -1 once closed */
    int rank;
    st_outbuf_t *out; /* where its lines go */
    bool midline;     /* part of the line is out (over-long, or redrawn): no prefix before more */
    bool redrawing;   /* live destination: the line had a '\r'; its text goes out as it comes */
    bool cr;          /* a '\r' waits: the next text redraws the line (a '\n' just ends it) */
    char *buf;
    size_t len, cap;
} st_stream_t;

void st_out_flush(st_outbuf_t *b);

/* Ends the line a stream left open on b (a redrawn progress line) and flushes, so that what is
 * written next starts on a line of its own. */
void st_out_break(st_outbuf_t *b);

/* Reads once from a readable stream and writes out its complete lines. Returns true when data
 * came, false on EOF (the stream is then closed) or when nothing was there. */
bool st_stream_read(st_stream_t *s);

/* Ends a partial last line, closes the fd and frees the buffer; no-op when already closed. */
void st_stream_close(st_stream_t *s);

/* ---- binding.c: the ranks' CPUs ---- */

typedef enum { ST_BIND_NONE, ST_BIND_CORE, ST_BIND_NUMA } st_bind_t;

/* "none", "core", "numa"; and back (false for anything else). */
const char *st_bind_name(st_bind_t b);
bool st_bind_parse(const char *s, st_bind_t *out);

/* Each rank's CPUs for policy `want` within the CPUs this process may use: a core each when there
 * are as many cores (else NUMA nodes, else none, saying why in `why`), or NUMA nodes in blocks of
 * ranks. Returns the policy applied; sets[0..nranks) is filled unless it is NONE. */
st_bind_t st_bind_sets(st_bind_t want, int nranks, cpu_set_t *sets, char *why, size_t size);

#endif
