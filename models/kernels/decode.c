/* One decoding step of the transformer core on the CPU, float32: every block and the final
 * norm for the few new rows of a KV-cached generation, in one call.
 *
 * The maths is the core's (models/core.py): pre-norm blocks with LayerNorm or RMSNorm, an
 * optional QK RMSNorm, attention over the cache and the new rows under a boolean mask, a GELU
 * MLP, and optional adaLN modulation whose rows come from packed per-position tables
 * [6·L + 2, P, d] at each row's target position, and optional rotary positions (RoPE, the
 * "rotate half" layout of `rotate` in models/core.py): each new row's query turns by its query
 * position and its key by its key position (AR: both its own place; AO-GPT: the query by its
 * target, the key by its token's own position) before the key enters the cache. A decoding step reads every weight for a
 * handful of rows, so its cost is memory traffic plus, in eager PyTorch, ~200 operator calls;
 * here it is one call. Linear weights are read from panels packed once per generation, in
 * memory order, so the hardware prefetcher streams them.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <omp.h>

typedef struct {  /* one block; NULL for absent biases or QK norms */
    const float *norm1_w, *norm1_b, *qkv_w, *qkv_b, *attn_w, *attn_b, *q_norm, *k_norm;
    const float *norm2_w, *norm2_b, *fc_w, *fc_b, *mlp_w, *mlp_b;
    float *k_cache, *v_cache; /* [B, H, capacity, hd] */
} Block;

typedef struct {
    int64_t B, m, d, H, c, capacity, P; /* batch, new rows per sequence, width, heads, cached, cache size, table rows */
    float eps;
    int center;                     /* LayerNorm (1) or RMSNorm (0) */
    const float *tables;            /* [6L + 2, P, d] adaLN rows, or NULL */
    const int64_t *targets;         /* [B·m] table row of each new row */
    const unsigned char *mask;      /* [m, c + m] which keys each new row sees, or NULL: all */
    int threads;
    const float *rope_freqs;        /* [hd / 2] RoPE frequency of each pair, or NULL: no rotation */
    const int64_t *q_pos, *k_pos;   /* [B·m] position each new row's query / key turns by, or NULL: c + t */
} Step;

#define ROWS 8   /* rows per register block of the linear kernel */
#define LANES 8  /* outputs per weight panel: the floats of one AVX2 register */

/* Read by decoder.py, so the padding and panel layout it prepares always match this file. */
const int64_t DECODE_ROWS = ROWS, DECODE_LANES = LANES;

/* Floats of scratch `decode_step` needs: per padded row a (d), y (d), qkv (3d), att (d), hid
 * (4d) and its RoPE angles (cos, sin for the query and the key: 2·hd <= 2d), plus one row of
 * attention scores (c + m keys) per thread. */
int64_t decode_scratch_floats(int64_t R_pad, int64_t d, int64_t threads, int64_t n_keys) {
    return R_pad * 12 * d + threads * n_keys;
}

/* y[r, o] = x[r, :] · w[o, :] + b[o] for R rows (a multiple of ROWS; x zero-padded). The
 * weight comes packed in panels of LANES outputs, [out / LANES, in, LANES] (`pack_panels` in
 * decoder.py): each panel streams through once, in memory order, while ROWS x LANES sums
 * accumulate in vector registers (one weight load and ROWS broadcasts feed ROWS multiply-adds
 * per input feature; no horizontal sums). Measured against 4 rows x 2 panels: 1.14 vs 1.28 ms
 * per 3M decoding step. */
static void linear(const float *x, int64_t R, int64_t in, const float *panels, const float *b, int64_t out,
                   float *y, int threads) {
    const int64_t n_panels = (out + LANES - 1) / LANES;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int64_t p = 0; p < n_panels; p++) {
        const float *restrict pw = panels + p * in * LANES;
        const int64_t o0 = p * LANES, width = out - o0 < LANES ? out - o0 : LANES;
        for (int64_t r0 = 0; r0 < R; r0 += ROWS) {
            const float *restrict xs = x + r0 * in;
            float acc[ROWS][LANES];
            for (int r = 0; r < ROWS; r++)
                for (int l = 0; l < LANES; l++) acc[r][l] = 0.0f;
            for (int64_t i = 0; i < in; i++)
                for (int r = 0; r < ROWS; r++) {
                    const float xr = xs[r * in + i];
#pragma omp simd
                    for (int l = 0; l < LANES; l++) acc[r][l] += xr * pw[i * LANES + l];
                }
            for (int r = 0; r < ROWS; r++)
                for (int64_t l = 0; l < width; l++) y[(r0 + r) * out + o0 + l] = acc[r][l] + (b ? b[o0 + l] : 0.0f);
        }
    }
}

/* out = (norm(x)·w + b), then ·scale + shift when `mod` (chunks k, k + 1 of the tables). */
static void norm_rows(const float *x, float *out, int64_t R, int64_t d, const float *w, const float *b,
                      const Step *s, int64_t k, int64_t ld_out) {
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * d;
        float *o = out + r * ld_out;
        float mu = 0.0f, sq = 0.0f;
        if (s->center) {
            for (int64_t j = 0; j < d; j++) mu += xr[j];
            mu /= (float)d;
        }
        for (int64_t j = 0; j < d; j++) sq += (xr[j] - mu) * (xr[j] - mu);
        float rs = 1.0f / sqrtf(sq / (float)d + s->eps);
        for (int64_t j = 0; j < d; j++) o[j] = (xr[j] - mu) * rs * w[j] + (b ? b[j] : 0.0f);
        if (s->tables) {
            const float *shift = s->tables + (k * s->P + s->targets[r]) * d;
            const float *scale = shift + s->P * d;
            for (int64_t j = 0; j < d; j++) o[j] = o[j] * scale[j] + shift[j];
        }
    }
}

/* x[r] += y[r] (times the gate rows of chunk k when modulated). */
static void residual(float *x, const float *y, int64_t R, int64_t d, const Step *s, int64_t k) {
    for (int64_t r = 0; r < R; r++) {
        const float *gate = s->tables ? s->tables + (k * s->P + s->targets[r]) * d : NULL;
        for (int64_t j = 0; j < d; j++) x[r * d + j] += gate ? gate[j] * y[r * d + j] : y[r * d + j];
    }
}

static void rms_head(float *v, int64_t hd, const float *w, float eps) {
    float sq = 0.0f;
    for (int64_t j = 0; j < hd; j++) sq += v[j] * v[j];
    float rs = 1.0f / sqrtf(sq / (float)hd + eps);
    for (int64_t j = 0; j < hd; j++) v[j] = v[j] * rs * w[j];
}

/* exp(x) for x <= 0 to ~1 ulp: 2^k · e^f with |f| <= ln2 / 2 and a degree-6 polynomial
 * (Taylor terms; truncation error < 2e-8). Plain float arithmetic, so loops vectorize. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;  /* below, e^x < 2^-125: flushes to ~0 like expf */
    float k = floorf(x * 1.44269504f + 0.5f);
    float f = x - k * 0.693145751953125f - k * 1.428606765330187e-06f;  /* ln2 split in two */
    float poly = 1.0f + f * (1.0f + f * (0.5f + f * (1.0f / 6 + f * (1.0f / 24 + f * (1.0f / 120 + f * (1.0f / 720))))));
    int32_t bits = ((int32_t)k + 127) << 23;  /* 2^k */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return poly * scale;
}

/* Softmax attention of one query row q [hd] over n keys K, V [n, hd] (those `seen` lets it
 * see, or all): out = sum_j softmax(q·K_j · scale)_j V_j. p: n floats of scratch. */
static void attend_row(const float *restrict q, const float *restrict K, const float *restrict V,
                       const unsigned char *seen, int64_t n, int64_t hd, float scale, float *restrict p,
                       float *restrict out) {
    float top = -INFINITY, total = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t e = 0; e < hd; e++) dot += q[e] * K[j * hd + e];
        p[j] = seen && !seen[j] ? -INFINITY : dot * scale;
        top = p[j] > top ? p[j] : top;
    }
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < n; j++) {
        p[j] = p[j] == -INFINITY ? 0.0f : exp_nonpositive(p[j] - top);
        total += p[j];
    }
    for (int64_t e = 0; e < hd; e++) out[e] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float w = p[j] / total;
#pragma omp simd
        for (int64_t e = 0; e < hd; e++) out[e] += w * V[j * hd + e];
    }
}

/* RoPE angles of the new rows: per row r, [cos q | sin q | cos k | sin k], hd / 2 each, at
 * angle position·freq (float32, as `rope_angles`), with pair i's angle shared by features i
 * and i + hd / 2. */
static void rope_tables(const Step *s, float *angles) {
    const int64_t half = s->d / s->H / 2;
    for (int64_t r = 0; r < s->B * s->m; r++) {
        const int64_t own = s->c + r % s->m;
        const float pos[2] = {(float)(s->q_pos ? s->q_pos[r] : own), (float)(s->k_pos ? s->k_pos[r] : own)};
        for (int w = 0; w < 2; w++) {
            float *cs = angles + (r * 4 + 2 * w) * half;
            for (int64_t i = 0; i < half; i++) {
                const float angle = pos[w] * s->rope_freqs[i];
                cs[i] = cosf(angle);
                cs[half + i] = sinf(angle);
            }
        }
    }
}

/* v [hd] turned pairwise (features i, i + hd / 2) by angles cs = [cos | sin], hd / 2 each. */
static void rotate_half(float *restrict v, const float *restrict cs, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        const float a = v[i], b = v[half + i], c = cs[i], sn = cs[half + i];
        v[i] = a * c - b * sn;
        v[half + i] = b * c + a * sn;
    }
}

/* Write the new rows' keys and values into the cache, then attend: out [B·m, d]. qkv rows
 * have stride 3d (q | k | v). `scores` holds one row of c + m floats per thread. */
static void attention(const Block *blk, float *qkv, float *out, const Step *s, const float *angles, float *scores) {
    const int64_t B = s->B, m = s->m, d = s->d, H = s->H, hd = d / H, n = s->c + m;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int64_t r = 0; r < B * m; r++) {
        int64_t b = r / m, t = r % m;
        for (int64_t h = 0; h < H; h++) {
            float *q = qkv + r * 3 * d + h * hd, *k = q + d, *v = q + 2 * d;
            if (blk->q_norm) {
                rms_head(q, hd, blk->q_norm, s->eps);
                rms_head(k, hd, blk->k_norm, s->eps);
            }
            if (s->rope_freqs) {
                rotate_half(q, angles + r * 2 * hd, hd / 2);
                rotate_half(k, angles + r * 2 * hd + hd, hd / 2);
            }
            int64_t at = ((b * H + h) * s->capacity + s->c + t) * hd;
            memcpy(blk->k_cache + at, k, hd * sizeof(float));
            memcpy(blk->v_cache + at, v, hd * sizeof(float));
        }
    }
#pragma omp parallel for num_threads(s->threads) schedule(static) collapse(2) if (s->threads > 1)
    for (int64_t r = 0; r < B * m; r++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t b = r / m, t = r % m;
            const float *q = qkv + r * 3 * d + h * hd;
            const float *K = blk->k_cache + (b * H + h) * s->capacity * hd, *V = blk->v_cache + (b * H + h) * s->capacity * hd;
            float *p = scores + (int64_t)omp_get_thread_num() * n;
            attend_row(q, K, V, s->mask ? s->mask + t * n : NULL, n, hd, scale, p, out + r * d + h * hd);
        }
    }
}

/* erf(x) to 1.5e-7 (absolute): Abramowitz & Stegun 7.1.26, in vectorizable float arithmetic. */
static inline float erf_as(float x) {
    float z = fabsf(x), t = 1.0f / (1.0f + 0.3275911f * z);
    float poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
    return copysignf(1.0f - poly * exp_nonpositive(-z * z), x);
}

/* GELU (the erf form, as F.gelu) in place. */
static void gelu(float *x, int64_t count) {
#pragma omp simd
    for (int64_t i = 0; i < count; i++) x[i] = 0.5f * x[i] * (1.0f + erf_as(x[i] * (float)M_SQRT1_2));
}

/* x [R_pad, d]: the new rows' inputs (R = B·m real rows, zero-padded to a multiple of ROWS);
 * the residual stream is updated in place. out [R, d]: the final norm of it. scratch holds
 * decode_scratch_floats(R_pad, d, threads, c + m) floats. */
void decode_step(const Block *blocks, int64_t n_layer, const float *final_w, const float *final_b,
                 const Step *s, float *x, int64_t R_pad, float *out, float *scratch) {
    const int64_t R = s->B * s->m, d = s->d;
    float *a = scratch, *y = a + R_pad * d, *qkv = y + R_pad * d, *att = qkv + R_pad * 3 * d;
    float *hid = att + R_pad * d, *angles = hid + R_pad * 4 * d, *scores = angles + R_pad * 2 * d;
    memset(a, 0, R_pad * d * sizeof(float));      /* padding rows stay zero */
    memset(att, 0, R_pad * d * sizeof(float));
    memset(hid, 0, R_pad * 4 * d * sizeof(float));
    if (s->rope_freqs) rope_tables(s, angles);
    for (int64_t l = 0; l < n_layer; l++) {
        const Block *blk = blocks + l;
        norm_rows(x, a, R, d, blk->norm1_w, blk->norm1_b, s, 6 * l, d);
        linear(a, R_pad, d, blk->qkv_w, blk->qkv_b, 3 * d, qkv, s->threads);
        attention(blk, qkv, att, s, angles, scores);
        linear(att, R_pad, d, blk->attn_w, blk->attn_b, d, y, s->threads);
        residual(x, y, R, d, s, 6 * l + 2);
        norm_rows(x, a, R, d, blk->norm2_w, blk->norm2_b, s, 6 * l + 3, d);
        linear(a, R_pad, d, blk->fc_w, blk->fc_b, 4 * d, hid, s->threads);
        gelu(hid, R * 4 * d);
        linear(hid, R_pad, 4 * d, blk->mlp_w, blk->mlp_b, d, y, s->threads);
        residual(x, y, R, d, s, 6 * l + 5);
    }
    norm_rows(x, out, R, d, final_w, final_b, s, 6 * n_layer, d);
}
