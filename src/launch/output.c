/* Rank output for the launcher: every line a rank writes comes out whole, optionally prefixed with
 * "[r<rank>] ", however the ranks' writes interleave. Each rank's stdout and stderr arrive through
 * a pipe; a partial line waits in the stream's buffer until its newline, and complete lines are
 * gathered in one buffer per destination that is written out between reads, so the launcher is the
 * only writer of its stdout and stderr. A line longer than 1 MiB (or one that cannot be buffered)
 * is written in pieces, the prefix only before the first (and again after another rank's line,
 * which first ends the piece written).
 *
 * On a terminal, a line that a rank redraws in place ('\r', a progress bar) is passed through as it
 * comes: each redraw is written "\r[r<rank>] <text>", so the bar moves live under its prefix. When
 * another rank's line comes while such a line is open, the open line is ended first ('\n'), so
 * lines never run into each other; the redraw goes on below. In a file or a pipe a '\r' is just a
 * character of its line (the trainer prints complete lines there).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch/launch_internal.h"

#define LINE_MAX_BYTES (1 << 20) /* a longer line is written out in pieces */

static void write_all(st_outbuf_t *b, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len && !b->broken) {
        ssize_t n = write(b->fd, data + off, len - off);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && errno == EAGAIN) {
            // Someone made our stdout non-blocking; wait until it drains.
            struct pollfd p = {.fd = b->fd, .events = POLLOUT};
            poll(&p, 1, 1000);
        } else {
            b->broken = true;
        }
    }
}

void st_out_flush(st_outbuf_t *b)
{
    write_all(b, b->data, b->len);
    b->len = 0;
}

static void out_put(st_outbuf_t *b, const char *data, size_t n)
{
    if (b->broken || n == 0)
        return;
    if (b->len + n > sizeof b->data) {
        st_out_flush(b);
        if (n > sizeof b->data) {
            // Larger than the buffer: straight through (still in order, still the only writer).
            write_all(b, data, n);
            return;
        }
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

static void out_prefix(st_outbuf_t *b, int rank)
{
    char p[24];
    int n = snprintf(p, sizeof p, "[r%d] ", rank);
    out_put(b, p, (size_t)n);
}

/* Before stream s writes to b: another stream's line left open there is ended. */
static void take_line(st_outbuf_t *b, st_stream_t *s)
{
    if (b->open && b->open != s) {
        out_put(b, "\n", 1);
        b->open->midline = false; // its next text starts a line of its own, prefixed
    }
    b->open = NULL;
}

void st_out_break(st_outbuf_t *b)
{
    take_line(b, NULL);
    st_out_flush(b);
}

/* Emits one complete line: what waits in s->buf, then `data` (which ends with '\n'). */
static void emit_line(st_stream_t *s, const char *data, size_t n)
{
    st_outbuf_t *b = s->out;
    // Keep the prefix, the line and its newline in one buffer so they go out together.
    if (b->len + 24 + s->len + n > sizeof b->data)
        st_out_flush(b);
    take_line(b, s);
    if (!s->midline)
        out_prefix(b, s->rank);
    out_put(b, s->buf, s->len);
    out_put(b, data, n);
    s->len = 0;
    s->midline = s->redrawing = s->cr = false;
}

static bool buf_append(st_stream_t *s, const char *data, size_t n)
{
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n)
            cap *= 2;
        char *nb = realloc(s->buf, cap);
        if (!nb)
            return false;
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    return true;
}

/* Writes out what waits in s->buf and `data` without ending the line (too long, out of memory, or
 * a live redrawn line); after a pending '\r' the line is redrawn: "\r" and the prefix again. */
static void emit_partial(st_stream_t *s, const char *data, size_t n)
{
    st_outbuf_t *b = s->out;
    take_line(b, s);
    if (s->cr) {
        out_put(b, "\r", 1);
        s->midline = s->cr = false;
    }
    if (!s->midline)
        out_prefix(b, s->rank);
    out_put(b, s->buf, s->len);
    out_put(b, data, n);
    s->len = 0;
    s->midline = true;
    b->open = s;
}

void st_stream_close(st_stream_t *s)
{
    if (s->fd < 0)
        return;
    if (s->len > 0 || s->midline)
        emit_line(s, "\n", 1); // the partial last line, ended so the next rank's line starts clean
    close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
    s->midline = false;
}

bool st_stream_read(st_stream_t *s)
{
    char chunk[ST_LAUNCH_READ_CHUNK];
    ssize_t n = read(s->fd, chunk, sizeof chunk);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return false;
    if (n <= 0) {
        st_stream_close(s);
        st_out_flush(s->out);
        return false;
    }
    const char *p = chunk, *end = chunk + n;
    bool live = s->out->live;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *cr = live ? memchr(p, '\r', (size_t)((nl ? nl : end) - p)) : NULL;
        if (cr) { // a redraw: the text before it goes out, the text after it redraws the line
            if (cr > p || s->len > 0)
                emit_partial(s, p, (size_t)(cr - p));
            s->cr = s->redrawing = true;
            p = cr + 1;
            continue;
        }
        if (nl && s->redrawing) { // its text went out as it came: the rest, then the newline
            if (nl > p)
                emit_partial(s, p, (size_t)(nl - p));
            if (s->midline)
                emit_line(s, "\n", 1);
            else // nothing of it is out (another rank's line ended it): nothing to end
                s->redrawing = s->cr = false;
            p = nl + 1;
            continue;
        }
        if (nl) {
            emit_line(s, p, (size_t)(nl + 1 - p));
            p = nl + 1;
            continue;
        }
        size_t rest = (size_t)(end - p);
        if (s->redrawing) // live: the redrawn line's text as it comes
            emit_partial(s, p, rest);
        else if (s->len + rest > LINE_MAX_BYTES || !buf_append(s, p, rest))
            emit_partial(s, p, rest);
        break;
    }
    st_out_flush(s->out);
    return true;
}
