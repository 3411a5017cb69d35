/* Text for the SVG pictures strata draws (placements, scheduler simulations, pipeline timelines):
 * names written into XML escaped, so a host called "a&b" or "<x>" cannot break the file, and the
 * width a line of text takes, so a picture can be made as wide as its words. The drawing itself is
 * each picture's business. */
#include "base/base.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void st_xml_text(FILE *f, const char *s)
{
    for (; s && *s; s++)
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            // XML 1.0 forbids control characters other than tab, newline and carriage return.
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n' && *s != '\r')
                fputc('?', f);
            else
                fputc(*s, f);
        }
}

void st_xml_textf(FILE *f, const char *fmt, ...)
{
    char buf[512], *p = buf;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof buf && (p = malloc((size_t)n + 1)) != NULL) {
        va_start(ap, fmt);
        vsnprintf(p, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    st_xml_text(f, p ? p : buf);
    if (p != buf)
        free(p);
}

double st_svg_text_width(const char *s, double font_px)
{
    // Advances of DejaVu Sans (what sans-serif resolves to on Debian), rounded up per class.
    double em = 0;
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch & 0xC0) == 0x80) // UTF-8 continuation byte: its character was counted
            continue;
        if (strchr(" .,:;'|!ijlt()[]", ch))
            em += 0.40;
        else if ((ch >= 'A' && ch <= 'Z') || ch == 'm' || ch == 'w' || ch == '%' || ch >= 0x80)
            em += 0.90;
        else
            em += 0.66;
    }
    return em * font_px;
}
