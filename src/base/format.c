/* Numbers as text: doubles that read back exactly, sets of ranks as ranges. */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>

const char *st_format_double(double v, char *buf, size_t size)
{
    snprintf(buf, size, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, size, "%.17g", v);
    return buf;
}

void st_format_ranks(const bool *in, int n, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    for (int r = 0; r < n; r++) {
        if (!in[r])
            continue;
        int e = r;
        while (e + 1 < n && in[e + 1])
            e++;
        int w = e > r ? snprintf(buf + used, len - used, "%s%d-%d", used ? ", " : "", r, e)
                      : snprintf(buf + used, len - used, "%s%d", used ? ", " : "", r);
        if (w < 0 || (size_t)w >= len - used)
            return;
        used += (size_t)w;
        r = e;
    }
}
