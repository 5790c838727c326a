/* ref_model.c - the naive reference forward of ref_model.h: every step of
 * model.md section 5 as plain loops with double accumulators, over weights
 * dequantized here from the GGUF bytes (own f32/f16/bf16/q8_0 decoding). */
#include "ref_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gguf.h"
#include "common/half.h"

#define REF_MAX_POS 256
#define REF_EPS 1e-6

struct ref_layer {
    float *attn_norm, *post_norm, *ffn_gate, *ffn_up, *ffn_down;
    float *qkv, *gate, *beta, *alpha, *conv, *dt_bias, *ssm_a, *ssm_norm, *ssm_out;
    float *wq, *wk, *wv, *q_norm, *k_norm, *wo;
};

struct ref_model {
    struct gguf_file *f;
    float *embd, *out_norm, *output;
    struct ref_layer l[FX_LAYERS];
    float conv_state[FX_LAYERS][3][FX_CONV];
    float S[FX_LAYERS][FX_HV][FX_S][FX_S];   /* [key i][value j] */
    float kc[FX_LAYERS][REF_MAX_POS][FX_HKV * FX_D];
    float vc[FX_LAYERS][REF_MAX_POS][FX_HKV * FX_D];
    int pos;
    int failed;
};

static float ref_elem(const struct gguf_tensor *t, size_t i)
{
    const uint8_t *p = t->data;
    uint16_t h;
    float f;
    switch (t->type) {
    case CS_DTYPE_F32:
        memcpy(&f, p + 4 * i, 4);
        return f;
    case CS_DTYPE_F16:
        memcpy(&h, p + 2 * i, 2);
        return cs_half_to_float(h);
    case CS_DTYPE_BF16:
        memcpy(&h, p + 2 * i, 2);
        return cs_bf16_to_float(h);
    case CS_DTYPE_Q8_0:
        memcpy(&h, p + (i / 32) * 34, 2);
        return cs_half_to_float(h) * (float)(int8_t)p[(i / 32) * 34 + 2 + i % 32];
    }
    return NAN;
}

static float *ref_tensor(struct ref_model *r, const char *name)
{
    const struct gguf_tensor *t = gguf_find_tensor(r->f, name);
    if (!t) {
        r->failed = 1;
        return NULL;
    }
    size_t n = (size_t)(t->ne[0] * t->ne[1]);
    float *v = malloc(n * sizeof *v);
    if (!v) {
        r->failed = 1;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = ref_elem(t, i);
    return v;
}

static void ref_layer_load(struct ref_model *r, int i)
{
    struct ref_layer *L = &r->l[i];
    char n[96];
#define W(suffix) (snprintf(n, sizeof n, "blk.%d." suffix, i), ref_tensor(r, n))
    L->attn_norm = W("attn_norm.weight");
    L->post_norm = W("post_attention_norm.weight");
    L->ffn_gate = W("ffn_gate.weight");
    L->ffn_up = W("ffn_up.weight");
    L->ffn_down = W("ffn_down.weight");
    if ((i + 1) % 4 != 0) {
        L->qkv = W("attn_qkv.weight");
        L->gate = W("attn_gate.weight");
        L->beta = W("ssm_beta.weight");
        L->alpha = W("ssm_alpha.weight");
        L->conv = W("ssm_conv1d.weight");
        L->dt_bias = W("ssm_dt.bias");
        L->ssm_a = W("ssm_a");
        L->ssm_norm = W("ssm_norm.weight");
        L->ssm_out = W("ssm_out.weight");
    } else {
        L->wq = W("attn_q.weight");
        L->wk = W("attn_k.weight");
        L->wv = W("attn_v.weight");
        L->q_norm = W("attn_q_norm.weight");
        L->k_norm = W("attn_k_norm.weight");
        L->wo = W("attn_output.weight");
    }
#undef W
}

struct ref_model *ref_model_load(const char *path)
{
    struct ref_model *r = calloc(1, sizeof *r);
    struct cs_error err = {0};
    if (!r || gguf_open(&r->f, path, &err) != CS_OK) {
        fprintf(stderr, "ref_model: %s\n", err.msg);
        free(r);
        return NULL;
    }
    r->embd = ref_tensor(r, "token_embd.weight");
    r->out_norm = ref_tensor(r, "output_norm.weight");
    r->output = gguf_find_tensor(r->f, "output.weight") ? ref_tensor(r, "output.weight") : r->embd;
    for (int i = 0; i < FX_LAYERS; i++)
        ref_layer_load(r, i);
    if (r->failed) {
        ref_model_free(r);
        return NULL;
    }
    return r;
}

void ref_model_free(struct ref_model *r)
{
    if (!r)
        return;
    if (r->output != r->embd)
        free(r->output);
    free(r->embd);
    free(r->out_norm);
    for (int i = 0; i < FX_LAYERS; i++) {
        float **p = (float **)&r->l[i];
        for (size_t k = 0; k < sizeof r->l[i] / sizeof(float *); k++)
            free(p[k]);
    }
    gguf_close(r->f);
    free(r);
}

void ref_model_reset(struct ref_model *r)
{
    memset(r->conv_state, 0, sizeof r->conv_state);
    memset(r->S, 0, sizeof r->S);
    r->pos = 0;
}

/* ---- primitives ---- */

/* y[o] = sum_i W[o][i] x[i], W in ggml layout {n_in, n_out}. */
static void matvec(float *y, const float *W, const float *x, int n_in, int n_out)
{
    for (int o = 0; o < n_out; o++) {
        double s = 0;
        for (int i = 0; i < n_in; i++)
            s += (double)W[(size_t)o * n_in + i] * x[i];
        y[o] = (float)s;
    }
}

static void rmsnorm(float *y, const float *x, const float *w, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double sc = 1.0 / sqrt(ss / n + REF_EPS);
    for (int i = 0; i < n; i++)
        y[i] = (float)(x[i] * sc * (w ? w[i] : 1.0f));
}

static void l2norm(float *x, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double sc = 1.0 / sqrt(ss + REF_EPS);
    for (int i = 0; i < n; i++)
        x[i] = (float)(x[i] * sc);
}

static double silu(double x)
{
    return x / (1.0 + exp(-x));
}

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static double softplus(double x)
{
    return x > 20 ? x : log1p(exp(x));
}

/* NeoX RoPE on the first FX_ROPE dims: dim i pairs with i + FX_ROPE/2. */
static void rope(float *v, int pos)
{
    for (int i = 0; i < FX_ROPE / 2; i++) {
        double theta = pos * pow(1e7, -2.0 * i / FX_ROPE);
        double c = cos(theta), s = sin(theta), x0 = v[i], x1 = v[i + FX_ROPE / 2];
        v[i] = (float)(x0 * c - x1 * s);
        v[i + FX_ROPE / 2] = (float)(x0 * s + x1 * c);
    }
}

/* ---- mixers ---- */

static void ref_gdn(struct ref_model *r, int li, const float *xn, float *out)
{
    struct ref_layer *L = &r->l[li];
    static float mixed[FX_CONV], y[FX_CONV], z[FX_S * FX_HV], o[FX_S * FX_HV];
    float b[FX_HV], a[FX_HV];
    matvec(mixed, L->qkv, xn, FX_E, FX_CONV);
    matvec(z, L->gate, xn, FX_E, FX_S * FX_HV);
    matvec(b, L->beta, xn, FX_E, FX_HV);
    matvec(a, L->alpha, xn, FX_E, FX_HV);
    float (*cs)[FX_CONV] = r->conv_state[li];
    for (int c = 0; c < FX_CONV; c++) {
        const float *w = L->conv + 4 * c;
        double s = w[0] * (double)cs[0][c] + w[1] * (double)cs[1][c] + w[2] * (double)cs[2][c] +
                   w[3] * (double)mixed[c];
        y[c] = (float)silu(s);
        cs[0][c] = cs[1][c];
        cs[1][c] = cs[2][c];
        cs[2][c] = mixed[c];
    }
    float *q = y, *k = y + FX_GK * FX_S, *v = y + 2 * FX_GK * FX_S;
    for (int h = 0; h < FX_GK; h++) {
        l2norm(q + h * FX_S, FX_S);
        l2norm(k + h * FX_S, FX_S);
        for (int i = 0; i < FX_S; i++)
            q[h * FX_S + i] *= (float)(1.0 / sqrt((double)FX_S));
    }
    for (int h = 0; h < FX_HV; h++) {
        double beta = sigmoid(b[h]);
        double g = L->ssm_a[h] * softplus((double)a[h] + L->dt_bias[h]);
        float (*S)[FX_S] = r->S[li][h];
        const float *kh = k + (h % FX_GK) * FX_S, *qh = q + (h % FX_GK) * FX_S;
        const float *vh = v + h * FX_S;
        float decay = (float)exp(g), delta[FX_S];
        for (int i = 0; i < FX_S; i++)
            for (int j = 0; j < FX_S; j++)
                S[i][j] *= decay;
        for (int j = 0; j < FX_S; j++) {
            double kv = 0;
            for (int i = 0; i < FX_S; i++)
                kv += (double)S[i][j] * kh[i];
            delta[j] = (float)(beta * (vh[j] - kv));
        }
        for (int i = 0; i < FX_S; i++)
            for (int j = 0; j < FX_S; j++)
                S[i][j] += kh[i] * delta[j];
        for (int j = 0; j < FX_S; j++) {
            double s = 0;
            for (int i = 0; i < FX_S; i++)
                s += (double)S[i][j] * qh[i];
            o[h * FX_S + j] = (float)s;
        }
        rmsnorm(o + h * FX_S, o + h * FX_S, L->ssm_norm, FX_S);
        for (int j = 0; j < FX_S; j++)
            o[h * FX_S + j] = (float)(o[h * FX_S + j] * silu(z[h * FX_S + j]));
    }
    matvec(out, L->ssm_out, o, FX_S * FX_HV, FX_E);
}

static void ref_attention(struct ref_model *r, int li, const float *xn, float *out)
{
    struct ref_layer *L = &r->l[li];
    static float qg[2 * FX_D * FX_HQ], o[FX_D * FX_HQ];
    float *kc = r->kc[li][r->pos], *vc = r->vc[li][r->pos];
    matvec(qg, L->wq, xn, FX_E, 2 * FX_D * FX_HQ);
    matvec(kc, L->wk, xn, FX_E, FX_D * FX_HKV);
    matvec(vc, L->wv, xn, FX_E, FX_D * FX_HKV);
    for (int h = 0; h < FX_HKV; h++) {
        rmsnorm(kc + h * FX_D, kc + h * FX_D, L->k_norm, FX_D);
        rope(kc + h * FX_D, r->pos);
    }
    for (int h = 0; h < FX_HQ; h++) {
        float *q = qg + h * 2 * FX_D, *gate = q + FX_D;
        int kvh = h / (FX_HQ / FX_HKV);
        rmsnorm(q, q, L->q_norm, FX_D);
        rope(q, r->pos);
        double sc[REF_MAX_POS], mx = -INFINITY, sum = 0;
        for (int p = 0; p <= r->pos; p++) {
            double d = 0;
            for (int i = 0; i < FX_D; i++)
                d += (double)q[i] * r->kc[li][p][kvh * FX_D + i];
            sc[p] = d / sqrt((double)FX_D);
            mx = fmax(mx, sc[p]);
        }
        for (int p = 0; p <= r->pos; p++)
            sum += (sc[p] = exp(sc[p] - mx));
        for (int i = 0; i < FX_D; i++) {
            double acc = 0;
            for (int p = 0; p <= r->pos; p++)
                acc += sc[p] / sum * r->vc[li][p][kvh * FX_D + i];
            o[h * FX_D + i] = (float)(acc * sigmoid(gate[i]));
        }
    }
    matvec(out, L->wo, o, FX_D * FX_HQ, FX_E);
}

void ref_model_step(struct ref_model *r, int token, float *logits)
{
    float x[FX_E], xn[FX_E], mix[FX_E], g[256], u[256];
    if (r->pos >= REF_MAX_POS)
        return;
    memcpy(x, r->embd + (size_t)token * FX_E, sizeof x);
    for (int li = 0; li < FX_LAYERS; li++) {
        struct ref_layer *L = &r->l[li];
        int F = fx_ff[li];
        rmsnorm(xn, x, L->attn_norm, FX_E);
        if ((li + 1) % 4 != 0)
            ref_gdn(r, li, xn, mix);
        else
            ref_attention(r, li, xn, mix);
        for (int i = 0; i < FX_E; i++)
            x[i] += mix[i];
        rmsnorm(xn, x, L->post_norm, FX_E);
        matvec(g, L->ffn_gate, xn, FX_E, F);
        matvec(u, L->ffn_up, xn, FX_E, F);
        for (int i = 0; i < F; i++)
            g[i] = (float)(silu(g[i]) * u[i]);
        matvec(mix, L->ffn_down, g, F, FX_E);
        for (int i = 0; i < FX_E; i++)
            x[i] += mix[i];
    }
    rmsnorm(xn, x, r->out_norm, FX_E);
    matvec(logits, r->output, xn, FX_E, FX_VOCAB);
    r->pos++;
}
