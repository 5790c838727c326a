/* template_pystr.h - Python semantics the chat template (template.c) must
 * reproduce byte for byte: str.strip(), substring search, float repr and
 * json.dumps' spelling of numbers. Internal to coordinator/template*.c. */
#ifndef CS_TEMPLATE_PYSTR_H
#define CS_TEMPLATE_PYSTR_H

#include <stddef.h>

/* Narrow [*a, *b) of s by str.strip(): Unicode whitespace (str.isspace()) at
 * both ends; bytes that are not well-formed UTF-8 are not whitespace. */
void pystr_strip(const char *s, size_t *a, size_t *b);

/* Index of the first (last) occurrence of needle in s[a, b), or SIZE_MAX. */
size_t pystr_find_first(const char *s, size_t a, size_t b, const char *needle);
size_t pystr_find_last(const char *s, size_t a, size_t b, const char *needle);

/* Python repr of a float into out, or an integer when d is integral below
 * 1e16 (template.h, difference 5). json: json.dumps' spelling of infinities
 * and NaN (Infinity, NaN) instead of repr's (inf, nan). */
void pystr_number(double d, int json, char out[40]);

#endif
