/* One decoding step of grouped-query attention as one fused pass over the KV cache.

   For each group, the keys and values are read from memory once for up to MAX_ROWS query
   heads, in blocks of BLOCK keys (a group with more query heads takes one pass per MAX_ROWS
   of them; the later passes find the group's keys and values in the CPU's cache): the scores of the block, a softmax kept running across blocks (the
   "online softmax" of FlashAttention: a running maximum and sum, and a rescale of the output
   so far whenever the maximum grows), then the block's weighted sum of values. The keys are
   split into one contiguous range per thread (OpenMP: with gcc and pip's torch on Linux this is
   torch's own thread pool, the same libgomp; other pairings may start a second pool); each
   thread returns its unnormalised partial result, and the partials are merged at the end (as
   "flash decoding" does on GPUs).

   Portable C: GCC/Clang vector extensions, so the compiler picks the CPU's vector width.
   Built by course_utils/fused_decode.py; head width fixed at DK = 64.

   q: (B, h, DK) and out: (B, h, DK), contiguous float32. K, V: (B, g, T, DK) float32 whose
   rows of DK floats are contiguous, at any strides (in floats) between batches, groups and
   time steps: a slice cache[:, :, :T] of a preallocated (B, g, Tmax, DK) buffer, or a
   (B, T, g, DK) buffer seen as (B, g, T, DK), is read in place, without a copy.

   Scores of -inf (a key the query must not see) get weight 0, whichever thread's range they
   fall in; a query whose every score is -inf gets 0, as PyTorch's scaled_dot_product_attention
   gives. A NaN in q, K or V spreads to the output as it does in PyTorch (except where every
   score of a query is NaN over a short cache: PyTorch then gives 0, this kernel NaN). This
   relies on IEEE infinities and NaN: never build it with -ffast-math, -ffinite-math-only or
   the like (fused_decode.py refuses them in CC, and its self-test checks NaN and inf). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DK 64           /* head width */
#define BLOCK 32        /* keys per block (32 measured faster than 16, 64 or 128 at g = 4) */
#define MAX_ROWS 8      /* query heads of a group handled in one pass */

#if defined(__AVX512F__)
#define VW 16           /* floats per vector register */
#elif defined(__AVX__)
#define VW 8
#else
#define VW 4            /* SSE, NEON */
#endif
#define NV (DK / VW)    /* vectors per row of K, V or q */

typedef float vec __attribute__((vector_size(VW * 4)));
typedef int ivec __attribute__((vector_size(VW * 4)));
typedef float vec8 __attribute__((vector_size(32)));
typedef float vec4 __attribute__((vector_size(16)));

static inline vec load(const float *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline void store(float *p, vec v) { memcpy(p, &v, sizeof v); }
static inline vec splat(float x) { return (vec){0} + x; }

static inline vec vmax(vec a, vec b) {
    ivec a_bigger = a > b;
    return (vec)((a_bigger & (ivec)a) | (~a_bigger & (ivec)b));
}

static inline float hsum(vec v) {
#if VW == 16
    vec8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
             __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#elif VW == 8
    vec8 a = v;
#endif
#if VW >= 8
    vec4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
#else
    vec4 b = v;
#endif
    return (b[0] + b[2]) + (b[1] + b[3]);
}

static inline float hmax(vec v) {
    float m = v[0];
    for (int i = 1; i < VW; i++) m = v[i] > m ? v[i] : m;
    return m;
}

/* exp(x) for x <= 0 (shifted scores): 2^n * p(f), relative error about 2e-7; exactly 0 below
   -87 (where exp is below float32's smallest normal number), so a score of -inf gets weight 0.
   A NaN stays NaN (a select on x < -87, not a max), so a corrupted cache shows in the output
   as it does in PyTorch's attention. */
static inline vec vexp(vec x) {
    const ivec too_small = x < splat(-87.0f);
    x = (vec)((too_small & (ivec)splat(-87.0f)) | (~too_small & (ivec)x));
    vec t = x * 1.44269504088896341f;
    vec n = (t + 12582912.0f) - 12582912.0f;   /* round to the nearest integer */
    vec f = t - n;                               /* in [-0.5, 0.5] */
    vec p = splat(1.535336188319500e-4f);
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    p = p * f + 1.0f;
    ivec bits = (__builtin_convertvector(n, ivec) + 127) << 23;   /* 2^n */
    return (vec)(~too_small & (ivec)(p * (vec)bits));
}

/* `rows` query heads (a constant after inlining) against n_keys keys of one group, key t's
   row at K + t * ks, value t's at V + t * vs. Writes the unnormalised output
   acc = sum_t exp(s_t - max) v_t, the max (-inf while every score so far is -inf) and the sum. */
static inline __attribute__((always_inline)) void attend_rows(
        const float *q, const float *K, const float *V, long n_keys, long ks, long vs,
        float *acc_out, float *max_out, float *sum_out, const int rows) {
    vec qs[MAX_ROWS][NV], acc[MAX_ROWS][NV];
    float run_max[MAX_ROWS], run_sum[MAX_ROWS];
    float w[MAX_ROWS][BLOCK] __attribute__((aligned(64)));
    for (int i = 0; i < rows; i++) {
        run_max[i] = -INFINITY;
        run_sum[i] = 0.0f;
        for (int j = 0; j < NV; j++) {
            qs[i][j] = load(q + i * DK + VW * j) * 0.125f;   /* 1 / sqrt(DK) */
            acc[i][j] = splat(0.0f);
        }
    }
    for (long t0 = 0; t0 < n_keys; t0 += BLOCK) {
        const int n = n_keys - t0 < BLOCK ? (int)(n_keys - t0) : BLOCK;
        const float *Kb = K + t0 * ks, *Vb = V + t0 * vs;
        for (int t = 0; t < n; t++) {   /* scores; ask for this block's V meanwhile */
            for (int j = 0; j < DK; j += 16) __builtin_prefetch(Vb + t * vs + j);
            vec k[NV];
            for (int j = 0; j < NV; j++) k[j] = load(Kb + t * ks + VW * j);
            for (int i = 0; i < rows; i++) {
                vec a = qs[i][0] * k[0];
                for (int j = 1; j < NV; j++) a += qs[i][j] * k[j];
                w[i][t] = hsum(a);
            }
        }
        for (int i = 0; i < rows; i++) {   /* running softmax: rescale what came before */
            for (int t = n; t < BLOCK; t++) w[i][t] = -INFINITY;
            vec m = load(w[i]);
            for (int j = VW; j < BLOCK; j += VW) m = vmax(m, load(w[i] + j));
            const float block_max = hmax(m);
            const float new_max = block_max > run_max[i] ? block_max : run_max[i];
            const float rescale = run_max[i] == -INFINITY ? 0.0f : expf(run_max[i] - new_max);
            /* Every score so far -inf (a masked start): shift by 0, not by -inf, since
               -inf - (-inf) is NaN; the block's weights are then exp(-inf) = 0. */
            const float shift = new_max == -INFINITY ? 0.0f : new_max;
            vec s = splat(0.0f);
            for (int j = 0; j < BLOCK; j += VW) {
                vec p = vexp(load(w[i] + j) - shift);
                store(w[i] + j, p);
                s += p;
            }
            run_max[i] = new_max;
            run_sum[i] = run_sum[i] * rescale + hsum(s);
            for (int j = 0; j < NV; j++) acc[i][j] *= rescale;
        }
        for (int t = 0; t < n; t++) {   /* weights @ V; ask for the next block's K meanwhile */
            if (t0 + BLOCK + t < n_keys)
                for (int j = 0; j < DK; j += 16) __builtin_prefetch(Kb + (BLOCK + t) * ks + j);
            vec v[NV];
            for (int j = 0; j < NV; j++) v[j] = load(Vb + t * vs + VW * j);
            for (int i = 0; i < rows; i++)
                for (int j = 0; j < NV; j++) acc[i][j] += w[i][t] * v[j];
        }
    }
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < NV; j++) store(acc_out + i * DK + VW * j, acc[i][j]);
        max_out[i] = run_max[i];
        sum_out[i] = run_sum[i];
    }
}

#define ATTEND(R) \
    static void attend##R(const float *q, const float *K, const float *V, long n, long ks, long vs, \
                          float *acc, float *mx, float *sm) { \
        attend_rows(q, K, V, n, ks, vs, acc, mx, sm, R); }
ATTEND(1)
ATTEND(2)
ATTEND(3)
ATTEND(4)
ATTEND(5)
ATTEND(6)
ATTEND(7)
ATTEND(8)

typedef struct {   /* one thread's share: keys [t_begin, t_end) of every (batch, group) */
    const float *q, *K, *V;
    float *acc, *max, *sum;   /* (B*h, DK), (B*h), (B*h) */
    long B, h, g, T, t_begin, t_end;
    long kb, kg, kt, vb, vg, vt;   /* strides of K and V, in floats: batch, group, time */
} Share;

static void *run_share(void *arg) {
    const Share *s = arg;
    const long r = s->h / s->g, n = s->t_end - s->t_begin;
    for (long b = 0; b < s->B; b++)
        for (long j = 0; j < s->g; j++) {
            const float *Kg = s->K + b * s->kb + j * s->kg + s->t_begin * s->kt;
            const float *Vg = s->V + b * s->vb + j * s->vg + s->t_begin * s->vt;
            const long ks = s->kt, vs = s->vt;
            for (long i = 0; i < r; i += MAX_ROWS) {
                const long row = b * s->h + j * r + i;
                const float *q = s->q + row * DK;
                float *acc = s->acc + row * DK, *mx = s->max + row, *sm = s->sum + row;
                switch (r - i < MAX_ROWS ? r - i : MAX_ROWS) {   /* rows in this pass */
                    case 1: attend1(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    case 2: attend2(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    case 3: attend3(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    case 4: attend4(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    case 5: attend5(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    case 6: attend6(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    case 7: attend7(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                    default: attend8(q, Kg, Vg, n, ks, vs, acc, mx, sm); break;
                }
            }
        }
    return NULL;
}

/* out = softmax(q K^T / sqrt(DK)) V for every query head; 0 on success, -1 if out of memory.
   k_strides and v_strides: (batch, group, time) strides of K and V in floats. */
int fused_decode(const float *q, const float *K, const float *V, float *out,
                 long B, long h, long g, long T, const long *k_strides, const long *v_strides,
                 int threads) {
    if (threads < 1) threads = 1;
    long per = (T + threads - 1) / threads;
    per = (per + BLOCK - 1) / BLOCK * BLOCK;   /* whole blocks per thread */
    if ((long)threads > (T + per - 1) / per) threads = (int)((T + per - 1) / per);
    const long rows = B * h;
    Share *shares = calloc(threads, sizeof *shares);
    float *parts = malloc(sizeof(float) * threads * rows * (DK + 2));
    if (!shares || !parts) { free(shares); free(parts); return -1; }
    for (int p = 0; p < threads; p++) {
        float *base = parts + p * rows * (DK + 2);
        shares[p] = (Share){q, K, V, base, base + rows * DK, base + rows * (DK + 1),
                            B, h, g, T, p * per, (p + 1) * per < T ? (p + 1) * per : T,
                            k_strides[0], k_strides[1], k_strides[2],
                            v_strides[0], v_strides[1], v_strides[2]};
    }
    /* With OpenMP this reuses the thread pool PyTorch already runs (same libgomp);
       without it, the shares run one after another. */
    #pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int p = 0; p < threads; p++) run_share(&shares[p]);
    for (long row = 0; row < rows; row++) {   /* merge the partials */
        float m = -INFINITY, total = 0.0f, o[DK] = {0};
        for (int p = 0; p < threads; p++) m = shares[p].max[row] > m ? shares[p].max[row] : m;
        for (int p = 0; p < threads; p++) {
            /* A share whose scores are all -inf weighs 0 (its sum and acc are 0, or NaN if
               its part of q, K or V held one: 0 * NaN keeps the NaN, as PyTorch does). */
            const float c = shares[p].max[row] == -INFINITY ? 0.0f : expf(shares[p].max[row] - m);
            total += c * shares[p].sum[row];
            for (int d = 0; d < DK; d++) o[d] += c * shares[p].acc[row * DK + d];
        }
        /* total is 0 only when every score is -inf: the output is then 0, as in PyTorch. */
        for (int d = 0; d < DK; d++) out[row * DK + d] = total == 0.0f ? o[d] : o[d] / total;
    }
    free(shares); free(parts);
    return 0;
}

/* The read-only yardstick of course_utils/bench/decode_step.py (not part of the kernel): the
   sum of n floats, each read once, the range split over `threads` OpenMP threads in equal
   contiguous parts. It reads memory and writes nothing, compiled with the kernel's flags, so a
   decoding step's bytes per second can be set against what it reads at best; make_read_probe
   races it against torch.sum and keeps the faster (torch.sum read about a fifth slower on an
   Intel Xeon, 11-18% faster on an AVX-512 AMD EPYC). Four independent
   vector sums per range hide the additions' latency; each run of 4096 floats is added into a
   double, so the total is exact enough for the caller to check it against torch.sum. */
double read_sum(const float *x, long n, int threads) {
    const long run = 4096;   /* floats summed in float before going into the double total */
    const long runs = n > 0 ? (n + run - 1) / run : 0;
    double total = 0.0;
    if (threads < 1) threads = 1;
    #pragma omp parallel for num_threads(threads) schedule(static) reduction(+:total)
    for (long r = 0; r < runs; r++) {
        const float *p = x + r * run;
        const long m = n - r * run < run ? n - r * run : run;
        vec s0 = splat(0.0f), s1 = s0, s2 = s0, s3 = s0;
        long i = 0;
        for (; i + 4 * VW <= m; i += 4 * VW) {
            s0 += load(p + i);
            s1 += load(p + i + VW);
            s2 += load(p + i + 2 * VW);
            s3 += load(p + i + 3 * VW);
        }
        float tail = 0.0f;
        for (; i < m; i++) tail += p[i];
        total += (double)hsum((s0 + s1) + (s2 + s3)) + (double)tail;
    }
    return total;
}
