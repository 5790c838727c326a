/* template_pystr.c - the Python semantics the chat template's output depends
 * on (template_pystr.h): str.strip() with Unicode whitespace, substring search
 * as `in` / .split() use it, and repr / json.dumps of floats. Pure functions
 * of their arguments; the rendering itself is template.c. */
#include "template_pystr.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decode one UTF-8 code point at p (n bytes left); returns its length, or 0
 * when the bytes are not well-formed UTF-8. */
static size_t utf8_decode(const unsigned char *p, size_t n, uint32_t *cp)
{
    size_t len;
    uint32_t c = p[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, c &= 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, c &= 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, c &= 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3F);
    }
    *cp = c;
    return len;
}

/* Python's str.isspace(): bidi classes WS, B, S or category Zs. */
static int py_isspace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Narrow [*a, *b) of s by str.strip(): Unicode whitespace at both ends. */
void pystr_strip(const char *s, size_t *a, size_t *b)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t cp;
    while (*a < *b) {
        size_t n = utf8_decode(p + *a, *b - *a, &cp);
        if (!n || !py_isspace(cp))
            break;
        *a += n;
    }
    while (*b > *a) {
        size_t start = *b - 1;
        while (start > *a && *b - start < 4 && (p[start] & 0xC0) == 0x80)
            start--;
        size_t n = utf8_decode(p + start, *b - start, &cp);
        if (n != *b - start || !py_isspace(cp))
            break;
        *b = start;
    }
}

/* Index of the first (last) occurrence of needle in s[a, b), or SIZE_MAX. */
size_t pystr_find_first(const char *s, size_t a, size_t b, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = a; i + k <= b; i++)
        if (memcmp(s + i, needle, k) == 0)
            return i;
    return SIZE_MAX;
}

size_t pystr_find_last(const char *s, size_t a, size_t b, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = b; i >= a + k; i--)
        if (memcmp(s + i - k, needle, k) == 0)
            return i - k;
    return SIZE_MAX;
}

/* Python repr of a float, or an integer when d is integral below 1e16 (cJSON
 * does not keep the int/float distinction: template.h, difference 5). json
 * selects json.dumps' spelling of infinities and NaN. */
void pystr_number(double d, int json, char out[40])
{
    if (!isfinite(d)) {
        if (isnan(d))
            strcpy(out, json ? "NaN" : "nan");
        else
            strcpy(out, d > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
        return;
    }
    if (d == floor(d) && fabs(d) < 1e16) {
        snprintf(out, 40, "%lld", (long long)d);
        return;
    }
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    /* e is "[-]D[.DDD]e(+|-)XX": gather the digits and the exponent */
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *q = e + neg;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 23)
            digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = atoi(q + 1), decpt = exp10 + 1;
    char *o = out;
    if (neg)
        *o++ = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) { /* 0.000DDD */
            *o++ = '0', *o++ = '.';
            for (int i = 0; i < -decpt; i++)
                *o++ = '0';
            for (int i = 0; i < nd; i++)
                *o++ = digits[i];
        } else { /* DDD.DDD or DDD000.0 */
            for (int i = 0; i < decpt; i++)
                *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (decpt >= nd)
                *o++ = '0';
            for (int i = decpt; i < nd; i++)
                *o++ = digits[i];
        }
    } else { /* D.DDDe+XX */
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int i = 1; i < nd; i++)
                *o++ = digits[i];
        }
        o += sprintf(o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    *o = '\0';
}
