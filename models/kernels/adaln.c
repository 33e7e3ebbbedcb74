/* Fused CPU kernels of adaptive LayerNorm (adaLN) over token rows, float32.
 *
 * Every token row r of x [n, d] reads its modulation from row idx[r] of per-position tables
 * [P, d]. Eager PyTorch needs a gathered copy of each table row per token and a separate pass
 * per product; these kernels read the table rows in place and make one pass per direction.
 *
 *   gated residual   x1 = x + gate[idx]·y                      (optional: y = NULL skips it)
 *   modulated norm   h = (norm(x1)·w + b)·scale[idx] + shift[idx]
 *                    norm: LayerNorm (center = 1) or RMSNorm (center = 0); a norm without
 *                    affine passes w = 1, b = 0 (branch-free loops vectorize)
 *
 * A block's residual update is always followed by the next norm, so one call does both: the
 * new residual stream x1 is read once while still in cache, and the backward adds the norm's
 * input gradient to the stream's own in the same pass.
 *
 * Backward kernels split the rows into one contiguous range per thread (each streams its own
 * memory) and accumulate table and weight gradients per thread (thread 0 into the outputs,
 * the others into caller-provided scratch), then sum the partials into the outputs: no two
 * threads write the same address, so no atomics are needed.
 * Built with -fopenmp after torch is loaded, so it shares torch's OpenMP runtime.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

static void row_stats(const float *x, int64_t d, float eps, int center, float *mean, float *rstd) {
    float sum = 0.0f, sq = 0.0f, mu = 0.0f;
    if (center) {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < d; j++) sum += x[j];
        mu = sum / (float)d;
    }
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < d; j++) sq += (x[j] - mu) * (x[j] - mu);
    *mean = mu;
    *rstd = 1.0f / sqrtf(sq / (float)d + eps);
}

static void gated_row(const float *restrict x, const float *restrict y, const float *restrict gate,
                      float *restrict x1, int64_t d) {
#pragma omp simd
    for (int64_t j = 0; j < d; j++) x1[j] = x[j] + gate[j] * y[j];
}

static void modnorm_row(const float *restrict x, const float *restrict sc, const float *restrict sh,
                        const float *restrict w, const float *restrict b, float *restrict out,
                        float *mean, float *rstd, int64_t d, float eps, int center) {
    float mu, rs;
    row_stats(x, d, eps, center, &mu, &rs);
    *mean = mu;
    *rstd = rs;
#pragma omp simd
    for (int64_t j = 0; j < d; j++) out[j] = ((x[j] - mu) * rs * w[j] + b[j]) * sc[j] + sh[j];
}

/* x1 (written when y is given) and h [n, d]; mean, rstd [n] of the norm's input rows. */
void resnorm_forward(const float *x, const float *y, const int64_t *idx, const float *gate,
                     const float *scale, const float *shift, const float *w, const float *b,
                     float *x1, float *h, float *mean, float *rstd,
                     int64_t n, int64_t d, float eps, int center, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const int64_t p = idx[r];
        const float *in = x + r * d;
        if (y) {
            gated_row(in, y + r * d, gate + p * d, x1 + r * d, d);
            in = x1 + r * d;
        }
        modnorm_row(in, scale + p * d, shift + p * d, w, b, h + r * d, mean + r, rstd + r, d, eps, center);
    }
}

/* One row of the norm's backward: accumulates table and affine gradients and writes the
 * gradient with respect to the norm's input into gx. */
static void modnorm_row_backward(const float *restrict g, const float *restrict x, const float *restrict sc,
                                 const float *restrict w, const float *restrict b, float mu, float rs,
                                 float *restrict gsc, float *restrict gsh, float *restrict gw,
                                 float *restrict gb, float *restrict gx, int64_t d, int center) {
    float sum_gn = 0.0f, sum_gn_n = 0.0f;
#pragma omp simd reduction(+ : sum_gn, sum_gn_n)
    for (int64_t j = 0; j < d; j++) {
        float nh = (x[j] - mu) * rs;
        float ga = g[j] * sc[j];
        float gn = ga * w[j];
        gsh[j] += g[j];
        gsc[j] += g[j] * (nh * w[j] + b[j]);
        gw[j] += ga * nh;
        gb[j] += ga;
        sum_gn += gn;
        sum_gn_n += gn * nh;
    }
    float mean_gn = center ? sum_gn / (float)d : 0.0f, mean_gn_n = sum_gn_n / (float)d;
#pragma omp simd
    for (int64_t j = 0; j < d; j++) {
        float nh = (x[j] - mu) * rs;
        float gn = g[j] * sc[j] * w[j];
        gx[j] = rs * (gn - mean_gn - nh * mean_gn_n);
    }
}

/* The stream's total gradient gx (norm input gradient + the stream's own gx1), then the
 * residual branch's: gy = gx·gate, and gate's table row accumulates gx·y. */
static void gated_row_backward(const float *restrict gx1, const float *restrict y, const float *restrict gate,
                               float *restrict gx, float *restrict gy, float *restrict gg, int64_t d) {
#pragma omp simd
    for (int64_t j = 0; j < d; j++) {
        float total = gx[j] + (gx1 ? gx1[j] : 0.0f);
        gx[j] = total;
        if (y) {
            gy[j] = total * gate[j];
            gg[j] += total * y[j];
        }
    }
}

/* Partial sums: thread 0 accumulates into out itself, thread t > 0 into scratch + (t - 1) *
 * stride + offset. Each thread zeroes its own; `sum_partials` then adds them into out. */
static float *accumulator(float *out, float *scratch, int64_t stride, int64_t offset, int64_t len, int t) {
    float *acc = t == 0 ? out : scratch + (t - 1) * stride + offset;
    memset(acc, 0, len * sizeof(float));
    return acc;
}

static void sum_partials(float *out, const float *scratch, int64_t stride, int64_t offset, int64_t len, int nt) {
    for (int s = 1; s < nt; s++) {  /* static schedules map each i to the same thread every time */
        const float *part = scratch + (s - 1) * stride + offset;
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < len; i++) out[i] += part[i];
    }
}

/* Inputs: gh (gradient of h), gx1 (of the stream x1; NULL if unused), the norm's input rows xn
 * (x1, or x without a residual), y and gate (NULL without a residual). Outputs: gx [n, d]
 * (of x), gy [n, d] and ggate [P, d] (with a residual), gscale, gshift [P, d], gw, gb [d].
 * scratch: (threads - 1) x (3·P·d + 2·d) floats. */
void resnorm_backward(const float *gh, const float *gx1, const float *xn, const float *y, const int64_t *idx,
                      const float *gate, const float *scale, const float *w, const float *b,
                      const float *mean, const float *rstd, float *gx, float *gy, float *ggate,
                      float *gscale, float *gshift, float *gw, float *gb, float *scratch,
                      int64_t n, int64_t d, int64_t P, int center, int threads) {
    const int64_t table = P * d, stride = 3 * table + 2 * d;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *gsc = accumulator(gscale, scratch, stride, 0, table, t);
        float *gsh = accumulator(gshift, scratch, stride, table, table, t);
        float *gg = y ? accumulator(ggate, scratch, stride, 2 * table, table, t) : NULL;
        float *gwt = accumulator(gw, scratch, stride, 3 * table, d, t);
        float *gbt = accumulator(gb, scratch, stride, 3 * table + d, d, t);
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            const int64_t p = idx[r], o = r * d;
            modnorm_row_backward(gh + o, xn + o, scale + p * d, w, b, mean[r], rstd[r],
                                 gsc + p * d, gsh + p * d, gwt, gbt, gx + o, d, center);
            if (gx1 || y)
                gated_row_backward(gx1 ? gx1 + o : NULL, y ? y + o : NULL, y ? gate + p * d : NULL,
                                   gx + o, y ? gy + o : NULL, y ? gg + p * d : NULL, d);
        }
        sum_partials(gscale, scratch, stride, 0, table, nt);
        sum_partials(gshift, scratch, stride, table, table, nt);
        if (y) sum_partials(ggate, scratch, stride, 2 * table, table, nt);
        sum_partials(gw, scratch, stride, 3 * table, d, nt);
        sum_partials(gb, scratch, stride, 3 * table + d, d, nt);
    }
}
