/* Fused CPU kernels of adaptive LayerNorm (adaLN) over token rows, float32.
 *
 * Every token row r of x [n, d] reads its modulation from row idx[r] of per-position tables
 * [P, d]. Eager PyTorch needs a gathered copy of each table row per token and a separate pass
 * per product; these kernels read the table rows in place and make one pass per direction.
 *
 *   modulated norm   a = norm(x)·w + b;  out = a·scale[idx] + shift[idx]
 *                    norm: LayerNorm (center = 1) or RMSNorm (center = 0); a norm without
 *                    affine passes w = 1, b = 0 (branch-free loops vectorize)
 *   gated residual   out = x + gate[idx]·y
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

void modnorm_forward(const float *x, const int64_t *idx, const float *scale, const float *shift,
                     const float *w, const float *b, float *out, float *mean, float *rstd,
                     int64_t n, int64_t d, float eps, int center, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d, *sc = scale + idx[r] * d, *sh = shift + idx[r] * d;
        float *o = out + r * d;
        float mu, rs;
        row_stats(xr, d, eps, center, &mu, &rs);
        mean[r] = mu;
        rstd[r] = rs;
#pragma omp simd
        for (int64_t j = 0; j < d; j++) {
            float a = (xr[j] - mu) * rs * w[j] + b[j];
            o[j] = a * sc[j] + sh[j];
        }
    }
}

/* One row's backward: table gradients for its position, partial w/b gradients, and gx. */
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

/* Partial sums: thread 0 accumulates into out itself, thread t > 0 into scratch + (t - 1) *
 * stride. Each thread zeroes its own accumulators; `sum_partials` then adds them into out. */
static float *accumulator(float *out, float *scratch, int64_t stride, int64_t offset, int t) {
    return t == 0 ? out : scratch + (t - 1) * stride + offset;
}

static void sum_partials(float *out, const float *scratch, int64_t stride, int64_t offset, int64_t len, int nt) {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < len; i++)
        for (int s = 1; s < nt; s++) out[i] += scratch[(s - 1) * stride + offset + i];
}

/* Outputs gx [n, d], gscale, gshift [P, d], gw, gb [d]; scratch: (threads - 1) x (2·P·d + 2·d). */
void modnorm_backward(const float *g, const float *x, const int64_t *idx, const float *scale,
                      const float *w, const float *b, const float *mean, const float *rstd,
                      float *gx, float *gscale, float *gshift, float *gw, float *gb, float *scratch,
                      int64_t n, int64_t d, int64_t P, int center, int threads) {
    const int64_t table = P * d, stride = 2 * table + 2 * d;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *gsc = accumulator(gscale, scratch, stride, 0, t), *gsh = accumulator(gshift, scratch, stride, table, t);
        float *gwt = accumulator(gw, scratch, stride, 2 * table, t), *gbt = accumulator(gb, scratch, stride, 2 * table + d, t);
        memset(gsc, 0, table * sizeof(float));
        memset(gsh, 0, table * sizeof(float));
        memset(gwt, 0, d * sizeof(float));
        memset(gbt, 0, d * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            int64_t p = idx[r];
            modnorm_row_backward(g + r * d, x + r * d, scale + p * d, w, b, mean[r], rstd[r],
                                 gsc + p * d, gsh + p * d, gwt, gbt, gx + r * d, d, center);
        }
        sum_partials(gscale, scratch, stride, 0, table, nt);
        sum_partials(gshift, scratch, stride, table, table, nt);
        sum_partials(gw, scratch, stride, 2 * table, d, nt);
        sum_partials(gb, scratch, stride, 2 * table + d, d, nt);
    }
}

void gated_forward(const float *x, const float *y, const int64_t *idx, const float *gate, float *out,
                   int64_t n, int64_t d, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * d, *yr = y + r * d, *gt = gate + idx[r] * d;
        float *o = out + r * d;
#pragma omp simd
        for (int64_t j = 0; j < d; j++) o[j] = xr[j] + gt[j] * yr[j];
    }
}

/* Outputs gy [n, d], ggate [P, d]; scratch: (threads - 1) x P·d. */
void gated_backward(const float *g, const float *y, const int64_t *idx, const float *gate, float *gy,
                    float *ggate, float *scratch, int64_t n, int64_t d, int64_t P, int threads) {
    const int64_t table = P * d;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        float *acc = accumulator(ggate, scratch, table, 0, t);
        memset(acc, 0, table * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n; r++) {
            int64_t p = idx[r];
            const float *restrict gr = g + r * d, *restrict yr = y + r * d, *restrict gt = gate + p * d;
            float *restrict gyr = gy + r * d, *restrict gg = acc + p * d;
#pragma omp simd
            for (int64_t j = 0; j < d; j++) {
                gyr[j] = gr[j] * gt[j];
                gg[j] += gr[j] * yr[j];
            }
        }
        sum_partials(ggate, scratch, table, 0, table, nt);
    }
}
