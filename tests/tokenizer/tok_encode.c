/* tok_encode.c - test driver: the C tokenizer as a command, for the Python
 * comparison tests.
 *
 *   tok_encode --tiktoken FILE [--vocab-size N] [--gguf TMP.gguf] MODE
 *
 * builds the vocabulary with vocab_tiktoken (or the fallback when FILE is
 * "-"), optionally writes it to a GGUF and reloads it from there, then:
 *   --vectors INP    llama.cpp test format (strings separated by
 *                    "\n__ggml_vocab_test__\n"): one line of ids per string
 *   --hex-lines F    each line of F is "x" + the hex of a text: prints
 *                    "<ids>|<hex of the incremental decoder's output>"
 *                    (add --special to recognise special tokens)
 *   --dump DIR       writes DIR/tokens.txt, DIR/types.txt, DIR/merges.txt
 *   --bench F        encodes file F, prints tokens and seconds */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/gguf.h"
#include "common/tokenizer.h"
#include "common/vocab_tiktoken.h"

static char *file_read(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[sz] = 0;
        *n = (size_t)sz;
    }
    return buf;
}

static void ids_print(const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
}

static int mode_vectors(const struct tokenizer *tok, const char *path)
{
    size_t n;
    char *d = file_read(path, &n);
    if (!d)
        return 2;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = d, *end = d + n;
    while (p < end) {
        char *q = strstr(p, sep);
        if (!q)
            break;
        int32_t *ids;
        size_t k;
        if (tokenizer_encode(tok, p, (size_t)(q - p), false, &ids, &k) != CS_OK)
            return 1;
        ids_print(ids, k);
        printf("\n");
        free(ids);
        p = q + sizeof sep - 1;
    }
    free(d);
    return 0;
}

static int hex_val(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int line_decode_print(const struct tokenizer *tok, const int32_t *ids, size_t k)
{
    struct tokenizer_decoder d;
    tokenizer_decoder_init(&d, tok, true);
    const char *t;
    size_t tn;
    for (size_t i = 0; i <= k; i++) {
        int rc = i < k ? tokenizer_decoder_feed(&d, ids[i], &t, &tn)
                       : tokenizer_decoder_flush(&d, &t, &tn);
        if (rc != CS_OK)
            return 1;
        for (size_t j = 0; j < tn; j++)
            printf("%02x", (uint8_t)t[j]);
    }
    tokenizer_decoder_free(&d);
    return 0;
}

static int mode_hex_lines(const struct tokenizer *tok, const char *path, bool special)
{
    size_t n;
    char *d = file_read(path, &n);
    if (!d)
        return 2;
    char *buf = malloc(n / 2 + 1);
    for (char *line = strtok(d, "\n"); line; line = strtok(NULL, "\n")) {
        size_t m = 0;
        for (size_t i = 1; line[0] == 'x' && line[i] && line[i + 1]; i += 2)
            buf[m++] = (char)(hex_val(line[i]) * 16 + hex_val(line[i + 1]));
        int32_t *ids;
        size_t k;
        if (tokenizer_encode(tok, buf, m, special, &ids, &k) != CS_OK)
            return 1;
        ids_print(ids, k);
        printf("|");
        if (line_decode_print(tok, ids, k) != 0)
            return 1;
        printf("\n");
        free(ids);
    }
    free(buf);
    free(d);
    return 0;
}

static int mode_dump(const struct vocab *v, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    FILE *ft = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/types.txt", dir);
    FILE *fy = fopen(path, "wb");
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    FILE *fm = fopen(path, "wb");
    if (!ft || !fy || !fm)
        return 2;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        fprintf(ft, "%s\n", v->tokens[i]);
        fprintf(fy, "%d\n", v->token_types[i]);
    }
    for (uint32_t i = 0; i < v->n_merges; i++)
        fprintf(fm, "%s\n", v->merges[i]);
    fclose(ft);
    fclose(fy);
    fclose(fm);
    fprintf(stderr, "tokens %u merges %u skipped %u eos %d pad %d\n", v->n_tokens, v->n_merges,
            v->n_merges_skipped, v->eos_id, v->pad_id);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int mode_bench(const struct tokenizer *tok, const char *path)
{
    size_t n;
    char *d = file_read(path, &n);
    if (!d)
        return 2;
    double t0 = now_s();
    int32_t *ids;
    size_t k;
    if (tokenizer_encode(tok, d, n, false, &ids, &k) != CS_OK)
        return 1;
    printf("%zu %.4f\n", k, now_s() - t0);
    free(ids);
    free(d);
    return 0;
}

/* Build the tokenizer, through a GGUF file when gguf_path is set. */
static int tok_build(const struct vocab *v, const char *gguf_path, struct tokenizer **tok,
                     struct cs_error *err)
{
    if (!gguf_path) {
        struct tokenizer_vocab_view view;
        vocab_view_fill(v, &view);
        return tokenizer_create(tok, &view, err);
    }
    struct gguf_writer *w;
    int rc = gguf_writer_create(&w);
    if (rc == CS_OK)
        rc = vocab_gguf_write(v, w);
    if (rc == CS_OK)
        rc = gguf_writer_write(w, gguf_path, err);
    gguf_writer_destroy(w);
    struct gguf_file *f = NULL;
    if (rc == CS_OK)
        rc = gguf_open(&f, gguf_path, err);
    if (rc == CS_OK)
        rc = tokenizer_create_from_gguf(tok, f, err);
    gguf_close(f);
    return rc;
}

int main(int argc, char **argv)
{
    const char *tk = NULL, *gguf_path = NULL, *mode = NULL, *arg = NULL;
    uint32_t vocab_size = 0;
    bool special = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiktoken") && i + 1 < argc)
            tk = argv[++i];
        else if (!strcmp(argv[i], "--vocab-size") && i + 1 < argc)
            vocab_size = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--gguf") && i + 1 < argc)
            gguf_path = argv[++i];
        else if (!strcmp(argv[i], "--special"))
            special = true;
        else if (i + 1 < argc && argv[i][0] == '-') {
            mode = argv[i];
            arg = argv[++i];
        }
    }
    if (!tk || !mode) {
        fprintf(stderr, "usage: tok_encode --tiktoken FILE|- [--vocab-size N] [--gguf F] "
                        "(--vectors F | --hex-lines F [--special] | --dump DIR | --bench F)\n");
        return 2;
    }
    struct cs_error err = {0};
    struct vocab *v = NULL;
    double t0 = now_s();
    int rc = strcmp(tk, "-") ? vocab_tiktoken_load(&v, tk, vocab_size, &err)
                             : vocab_fallback_create(&v, vocab_size, &err);
    double t1 = now_s();
    struct tokenizer *tok = NULL;
    if (rc == CS_OK)
        rc = tok_build(v, gguf_path, &tok, &err);
    if (rc != CS_OK) {
        fprintf(stderr, "tok_encode: %s (%s)\n", err.msg, cs_status_name(rc));
        return 1;
    }
    fprintf(stderr, "tok_encode: import %.3f s, tokenizer %.3f s\n", t1 - t0, now_s() - t1);
    if (!strcmp(mode, "--vectors"))
        rc = mode_vectors(tok, arg);
    else if (!strcmp(mode, "--hex-lines"))
        rc = mode_hex_lines(tok, arg, special);
    else if (!strcmp(mode, "--dump"))
        rc = mode_dump(v, arg);
    else if (!strcmp(mode, "--bench"))
        rc = mode_bench(tok, arg);
    else
        rc = 2;
    tokenizer_destroy(tok);
    vocab_destroy(v);
    return rc;
}
