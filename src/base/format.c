/* Numbers as text that reads back exactly. */
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
