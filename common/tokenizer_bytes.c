/* tokenizer_bytes.c - the GPT-2 byte-level mapping (bytes_to_unicode) that
 * GGUF token strings use, and the UTF-8 classification and sanitising shared
 * by the encoder (invalid input) and the incremental decoder (split
 * characters). Pure functions, no state beyond two constant tables built once
 * on first use (under pthread_once). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

/* Bytes printed as themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. The others
 * take code points 256, 257, ... in increasing byte order. */
static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t tokenizer_byte_to_cp(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++)
        if (!byte_is_printable(i))
            n++;
    return 256 + n;
}

int tokenizer_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    for (unsigned b = 0; b < 256; b++) {
        if (byte_is_printable(b))
            continue;
        if (n == 0)
            return (int)b;
        n--;
    }
    return -1;
}

/* Cached tables: cp_of[b] and the reverse for code points < 512. */
static uint16_t cp_of[256];
static int16_t byte_of[512];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void)
{
    for (unsigned i = 0; i < 512; i++)
        byte_of[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        cp_of[b] = (uint16_t)tokenizer_byte_to_cp((uint8_t)b);
        byte_of[cp_of[b]] = (int16_t)b;
    }
}

static void tables_build(void)
{
    pthread_once(&tables_once, tables_init);
}

size_t tokenizer_bytes_to_bytelevel(const uint8_t *in, size_t n, char *out)
{
    tables_build();
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cp_of[in[i]];
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o;
}

int tokenizer_bytelevel_to_bytes(const char *s, size_t n, uint8_t *out, size_t *out_n)
{
    tables_build();
    const uint8_t *p = (const uint8_t *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int k = tokenizer_utf8_classify(p + i, n - i);
        if (k <= 0)
            return CS_EFORMAT;
        uint32_t cp = p[i];
        if (k == 2)
            cp = ((uint32_t)(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
        else if (k > 2)
            return CS_EFORMAT;   /* every mapped code point is < U+0800 */
        if (cp >= 512 || byte_of[cp] < 0)
            return CS_EFORMAT;
        out[o++] = (uint8_t)byte_of[cp];
        i += (size_t)k;
    }
    *out_n = o;
    return CS_OK;
}

int tokenizer_utf8_classify(const uint8_t *s, size_t n)
{
    if (n == 0)
        return 0;
    uint8_t b = s[0];
    if (b < 0x80)
        return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;   /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n)
            return 0;
        uint8_t c = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (c < l || c > h)
            return -i;
    }
    return need + 1;
}

int tokenizer_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_n)
{
    /* Worst case: every byte becomes U+FFFD (3 bytes). */
    char *buf = malloc(n * 3 + 1);
    if (!buf)
        return CS_ENOMEM;
    const uint8_t *p = (const uint8_t *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int k = tokenizer_utf8_classify(p + i, n - i);
        if (k > 0) {
            memcpy(buf + o, p + i, (size_t)k);
            o += (size_t)k;
            i += (size_t)k;
            continue;
        }
        /* invalid subpart, or an incomplete tail (all of what is left) */
        size_t skip = k < 0 ? (size_t)-k : n - i;
        memcpy(buf + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += skip;
    }
    buf[o] = 0;
    *out = buf;
    *out_n = o;
    return CS_OK;
}
