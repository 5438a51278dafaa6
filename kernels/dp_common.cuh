// Per-state arithmetic of the checkpointing DP, shared by the CUDA kernels (dp.cu) and the host
// harness (tests/kernel_host/harness.cpp) so that CI can check the kernel arithmetic without a GPU.
//
// The recurrences, thresholds and float operation order are those of gpusolve/dp/problem.py:
//   tape(i, j, m)     = t_tape[i+1] + C(i+1, j, m - tape_b[i+1])      (j > i+1; = t_tape[i+1] at j = i+1)
//   ckpt(i, j, k, m)  = (sfn(i, k) + C(k, j, m - act_b[k])) + C(i, k, m)
//   sfn(i, k)         = (float)(prefix[k] - prefix[i])                (double subtraction, then rounding)
// each float addition is a separate round-to-nearest (__fadd_rn on the device, so nothing is
// contracted; the host harness is built with -ffp-contract=off and SSE arithmetic). Minimums are
// exact (fminf on the device): no value is NaN or -0, so the order of minimums changes no bit.
//
// Bit-for-bit caveat: CuPy compiles with -ftz=true, so the device flushes subnormal floats (below
// ~1.18e-38 ms) to zero where NumPy keeps them; the table equals gpusolve.dp.cpu's bit for bit as
// long as no time or sum of times is subnormal, i.e. every nonzero stage time is above ~1e-38 ms.
//
// Table: one row of W = M + 1 floats per pair, rows ordered by diagonal d = j - i, then by i:
//   row(i, j) = diag_offset(d) + i,  diag_offset(d) = (d - 1)(N + 1) - (d - 1) d / 2,
// followed by one sentinel row (index N (N + 1) / 2) that holds +inf in every bucket and is never
// written: staging points every sub-problem a candidate may not use at it, so the inner loops load
// unconditionally and such candidates come out +inf, which no minimum keeps.
//
// Thresholds in buckets: thr_ckpt(i, j, k) = ceil((grad[j] + nograd_peak[i][k]) / B). The kernels
// never divide 64-bit numbers per candidate: the host passes quotient and remainder of every size
// by B (quotients clamped to W, which already means "never allowed"), and
//   ceil((g + p) / B) = gq + pq + [gr + pr > 0] + [gr + pr > B]      (0 <= gr + pr < 2B).
// For fixed (i, j) thr_ckpt is nondecreasing in k (nograd_peak[i][.] is a running maximum), so the
// checkpoints allowed at bucket m are a prefix of k: loops over k stop at the first k with thr > m.
//
// NVRTC-compatible: no host headers.
#pragma once

#ifndef __CUDACC__
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#endif

// ------------------------------------------------------------------ launch geometry
// gpusolve/dp/cuda.py (class Geometry) owns these values: it prepends them as #define lines to the
// source it hands NVRTC, and the tests build the host harness with the same values as -D options.
// The defaults below are the Geometry() defaults, for `nvcc --ptx` and a bare harness build.
#ifndef DP_DIAG_THREADS
#define DP_DIAG_THREADS 128   // dp_diag: threads per block
#endif
#ifndef DP_DIAG_MPT
#define DP_DIAG_MPT 4         // dp_diag: buckets per thread
#endif
#ifndef DP_KTILE
#define DP_KTILE 32           // dp_diag: k values staged per tile
#endif
#ifndef DP_BAND
#define DP_BAND 8             // dp_bulk: diagonals per band, and the block's DP_BAND x DP_BAND pairs
#endif
#ifndef DP_BULK_THREADS
#define DP_BULK_THREADS 128   // dp_bulk: threads per block (one bucket each)
#endif
#ifndef DP_BULK_KTILE
#define DP_BULK_KTILE 8       // dp_bulk: k values staged per tile
#endif
#ifndef DP_REC_THREADS
#define DP_REC_THREADS 256    // dp_recover: threads of a block (one block per policy walked)
#endif

static_assert(DP_DIAG_THREADS % 32 == 0 && DP_DIAG_THREADS <= 1024, "DP_DIAG_THREADS: a multiple of 32, <= 1024");
static_assert(DP_DIAG_MPT >= 1, "DP_DIAG_MPT >= 1");
static_assert(DP_KTILE >= 1 && DP_KTILE <= DP_DIAG_THREADS, "DP_KTILE in [1, DP_DIAG_THREADS]");
static_assert(DP_BAND >= 1, "DP_BAND >= 1");
static_assert(DP_BULK_THREADS % 32 == 0 && DP_BULK_THREADS <= 1024, "DP_BULK_THREADS: a multiple of 32, <= 1024");
static_assert(DP_BULK_KTILE >= 1 && DP_BULK_KTILE <= DP_BULK_THREADS, "DP_BULK_KTILE in [1, DP_BULK_THREADS]");
static_assert(DP_REC_THREADS % 32 == 0 && DP_REC_THREADS >= 32 && DP_REC_THREADS <= 1024,
              "DP_REC_THREADS: a multiple of 32 in [32, 1024]");

#define DP_INF (__int_as_float_compat(0x7f800000))
#define DP_NEVER 0x7fffffff

typedef long long dp_i64;

__host__ __device__ static inline float __int_as_float_compat(int bits) {
#ifdef __CUDA_ARCH__
    return __int_as_float(bits);
#else
    union { int i; float f; } u;
    u.i = bits;
    return u.f;
#endif
}

__host__ __device__ static inline float dp_fadd(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    volatile float r = a + b;  // a single IEEE binary32 addition, round to nearest
    return r;
#endif
}

__host__ __device__ static inline float dp_fmin(float a, float b) {
#ifdef __CUDA_ARCH__
    return fminf(a, b);
#else
    return b < a ? b : a;  // = fminf for the values met here (no NaN, no -0)
#endif
}

// A table value: the read-only path on the device (rows read by a launch are never written by it).
__host__ __device__ static inline float dp_load(const float* p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}

// Read-only view of the instance (device or host pointers).
struct DpArgs {
    int n;              // N stages
    int width;          // W = M + 1 buckets per row
    int multi_tape;     // 0: tape only at j = i + 1 (thesis mode)
    dp_i64 bucket;      // bucket bytes B
    const float* t_tape;      // [N+1]
    const double* prefix;     // [N+1]
    const int* act_b;         // [N+1]
    const int* tape_b;        // [N+1]
    const int* grad_q;        // [N+1]  grad_bytes // B, clamped to W
    const dp_i64* grad_r;     // [N+1]  grad_bytes %  B
    const int* peak_q;        // [(N+1)^2] nograd_peak[i][k] // B, clamped to W
    const dp_i64* peak_r;     // [(N+1)^2] nograd_peak[i][k] %  B
    const dp_i64* tape_fwd;   // [N+1]  tape + forward-with-grad workspace of s
    const dp_i64* tape_need;  // [N+1]  what the backward of s needs
    const dp_i64* grad_bytes; // [N+1]
};

__host__ __device__ static inline dp_i64 dp_diag_offset(int n, int d) {
    return d >= 1 ? (dp_i64)(d - 1) * (n + 1) - (dp_i64)(d - 1) * d / 2 : 0;
}

__host__ __device__ static inline dp_i64 dp_row(int n, int i, int j) {
    return dp_diag_offset(n, j - i) + i;
}

// Row of the +inf sentinel: the one after the last pair.
__host__ __device__ static inline dp_i64 dp_sentinel_row(int n) {
    return (dp_i64)n * (n + 1) / 2;
}

// Start of row (i, j) when ``ok``, else of the sentinel row.
__host__ __device__ static inline const float* dp_row_ptr(const DpArgs& a, const float* table, int i, int j, bool ok) {
    const dp_i64 r = ok ? dp_row(a.n, i, j) : dp_sentinel_row(a.n);
    return table + r * (dp_i64)a.width;
}

__host__ __device__ static inline float dp_sfn(const DpArgs& a, int i, int k) {
    double diff = a.prefix[k] - a.prefix[i];
    return (float)diff;  // round to nearest, as numpy's astype(float32)
}

__host__ __device__ static inline int dp_thr_ckpt(const DpArgs& a, int i, int j, int k) {
    const dp_i64 pi = (dp_i64)i * (a.n + 1) + k;
    const dp_i64 rem = a.grad_r[j] + a.peak_r[pi];
    const int extra = (rem > 0 ? 1 : 0) + (rem > a.bucket ? 1 : 0);
    const int q = a.grad_q[j] + a.peak_q[pi] + extra;  // each quotient <= W: no overflow
    return q > a.width ? a.width : q;
}

// thr_tape(i, j) = ceil(max(grad[j] + tape_fwd[i+1], tape_need[i+1]) / B); one 64-bit division
// per thread and block, clamped to W.
__host__ __device__ static inline int dp_thr_tape(const DpArgs& a, int i, int j) {
    dp_i64 fwd = a.grad_bytes[j] + a.tape_fwd[i + 1];
    dp_i64 need = a.tape_need[i + 1];
    dp_i64 bytes = fwd > need ? fwd : need;
    dp_i64 q = (bytes + a.bucket - 1) / a.bucket;
    return q > a.width ? a.width : (int)q;
}

__host__ __device__ static inline float dp_ckpt_value(float sfn, float right, float left) {
    return dp_fadd(dp_fadd(sfn, right), left);
}

// The one statement of the tape candidate at (i, j, m); +inf where not allowed. Every kernel's
// tape value comes from here (a second tape variant would change only this function).
__host__ __device__ static inline float dp_tape_at(const DpArgs& a, const float* table, int i, int j, int m,
                                                   int thr_tape) {
    if (m < thr_tape) return DP_INF;
    if (j == i + 1) return a.t_tape[i + 1];
    if (!a.multi_tape) return DP_INF;
    int mr = m - a.tape_b[i + 1];
    mr = mr < 0 ? 0 : mr;
    return dp_fadd(a.t_tape[i + 1], dp_load(dp_row_ptr(a, table, i + 1, j, true) + mr));
}

// Checkpoints whose contribution the bulk kernel of band start D computes for pair (i, j):
// k in [j - D + 1, i + D - 1] (both sub-pairs on diagonals < D). Returns 0 when empty / no band.
__host__ __device__ static inline int dp_bulk_range(int i, int j, int band_start, int* lo, int* hi) {
    if (band_start <= 0) return 0;
    *lo = j - band_start + 1;
    *hi = i + band_start - 1;
    return *lo <= *hi;
}

// ------------------------------------------------------------------ per-k scalars (dp_diag, dp_recover)
// One checkpoint k of pair (i, j): the row bases of both sub-problems, hoisted out of the bucket loop.
struct DpKStage {
    const float* left;   // row (i, k)
    const float* right;  // row (k, j)
    float sfn;
    int act_b;
    int thr;
    int k;
};

__host__ __device__ static inline DpKStage dp_stage_k(const DpArgs& a, const float* table, int i, int j, int k) {
    DpKStage s;
    s.left = dp_row_ptr(a, table, i, k, true);
    s.right = dp_row_ptr(a, table, k, j, true);
    s.sfn = dp_sfn(a, i, k);
    s.act_b = a.act_b[k];
    s.thr = dp_thr_ckpt(a, i, j, k);
    s.k = k;
    return s;
}

// Candidate k at bucket m (the caller has checked m >= s.thr, hence m - act_b >= 0).
__host__ __device__ static inline float dp_ckpt_at(const DpKStage& s, int m) {
    int mr = m - s.act_b;
    mr = mr < 0 ? 0 : mr;  // never negative where allowed (thr >= act_b); guards the read
    return dp_ckpt_value(s.sfn, dp_load(s.right + mr), dp_load(s.left + m));
}

// Segments of k the diagonal kernel evaluates for pair (i, j): all of (i, j) without a band, else
// the two edges around the bulk range. Returns the number of segments (0..2).
__host__ __device__ static inline int dp_edge_segments(int i, int j, int band_start, int seg_lo[2], int seg_hi[2]) {
    int blo, bhi;
    if (!dp_bulk_range(i, j, band_start, &blo, &bhi)) {
        seg_lo[0] = i + 1;
        seg_hi[0] = j - 1;
        return 1;
    }
    seg_lo[0] = i + 1;
    seg_hi[0] = blo - 1;
    seg_lo[1] = bhi + 1;
    seg_hi[1] = j - 1;
    return 2;
}

// ------------------------------------------------------------------ bulk kernel pieces
// Block (i0, band D, len L): pairs (i, j) = (i0 + p, i0 + p + D + q), p, q in [0, DP_BAND), q < L,
// j <= N; right rows are indexed by c = p + q in [0, 2 DP_BAND - 1). Per staged k the block keeps
// the row bases of the left sub-problems (i0 + p, k) and of the right ones (k, i0 + D + c), each
// the sentinel row where the sub-pair is not final before the band (k - i >= D, j - k >= D) or does
// not exist: a candidate (p, q, k) is then +inf exactly when k is outside the pair's bulk range.
// Thresholds are kept only for pairs whose range holds k ("in range"); min_thr and max_thr are
// their least and largest (threads below min_thr skip k; a tile whose max_thr is at most the
// block's least bucket is evaluated without any threshold test), and stop_thr the least true
// threshold at k over pairs whose range is not finished (0 while some pair has i >= k):
// thresholds being nondecreasing in k, a block whose largest bucket is below stop_thr is done.
struct DpBulkStage {
    const float* left[DP_BAND];
    const float* right[2 * DP_BAND];  // entry 2 DP_BAND - 1 unused
    float sfn[DP_BAND];
    int thr[DP_BAND][DP_BAND];        // 0 where the pair is not in range (its candidate is +inf)
    int k;
    int act_b;
    int min_thr;
    int max_thr;
    int stop_thr;
};

// Entries of a stage's row bases: DP_BAND left then 2 DP_BAND - 1 right.
#define DP_BULK_PTRS (3 * DP_BAND - 1)

__host__ __device__ static inline int dp_bulk_pair_live(const DpArgs& a, int i0, int band_start, int band_len,
                                                        int p, int q) {
    const int j = i0 + p + band_start + q;
    return q < band_len && j <= a.n;
}

// Scalars of the stage that do not depend on (p, q); the reductions start empty.
__host__ __device__ static inline void dp_bulk_stage_head(const DpArgs& a, int i0, int k, DpBulkStage* s) {
    s->k = k;
    s->act_b = (k <= a.n) ? a.act_b[k] : 0;
    s->min_thr = DP_NEVER;
    s->max_thr = 0;
    s->stop_thr = DP_NEVER;
    for (int p = 0; p < DP_BAND; ++p) {
        const int i = i0 + p;
        s->sfn[p] = (k > i && k <= a.n) ? dp_sfn(a, i, k) : 0.0f;
    }
}

// Row base e of the stage at k: left (i0 + e, k) for e < DP_BAND, else right (k, i0 + D + e - DP_BAND).
__host__ __device__ static inline const float* dp_bulk_stage_ptr(const DpArgs& a, const float* table, int i0,
                                                                 int band_start, int k, int e) {
    if (e < DP_BAND) {
        const int i = i0 + e;
        return dp_row_ptr(a, table, i, k, k > i && k - i < band_start && k <= a.n);
    }
    const int j = i0 + band_start + (e - DP_BAND);
    return dp_row_ptr(a, table, k, j, j > k && j - k < band_start && j <= a.n);
}

// Threshold entry (p, q) at k; *stop receives the pair's contribution to stop_thr, *in_range
// whether the pair's bulk range holds k (then the entry counts in min_thr / max_thr).
__host__ __device__ static inline int dp_bulk_thr_entry(const DpArgs& a, int i0, int band_start, int band_len,
                                                        int k, int p, int q, int* stop, int* in_range) {
    *stop = DP_NEVER;
    *in_range = 0;
    if (!dp_bulk_pair_live(a, i0, band_start, band_len, p, q)) return 0;
    const int i = i0 + p;
    const int j = i + band_start + q;
    int lo, hi;
    if (!dp_bulk_range(i, j, band_start, &lo, &hi) || k > hi) return 0;
    if (k <= i) {
        *stop = 0;
        return 0;
    }
    const int t = dp_thr_ckpt(a, i, j, k);
    *stop = t;
    if (k < lo) return 0;
    *in_range = 1;
    return t;
}

// Row p of the stage at k: thr[p][q] for every q, and the row's part of the stage's reductions
// (*min_thr, *max_thr over in-range entries, DP_NEVER / 0 when none; *stop the least stop value).
__host__ __device__ static inline void dp_bulk_thr_row(const DpArgs& a, int i0, int band_start, int band_len, int k,
                                                       int p, DpBulkStage* s, int* min_thr, int* max_thr, int* stop) {
    int lo_thr = DP_NEVER, hi_thr = 0, least_stop = DP_NEVER;
#pragma unroll
    for (int q = 0; q < DP_BAND; ++q) {
        int st, in_range;
        const int t = dp_bulk_thr_entry(a, i0, band_start, band_len, k, p, q, &st, &in_range);
        s->thr[p][q] = t;
        least_stop = st < least_stop ? st : least_stop;
        if (in_range) {
            lo_thr = t < lo_thr ? t : lo_thr;
            hi_thr = t > hi_thr ? t : hi_thr;
        }
    }
    *min_thr = lo_thr;
    *max_thr = hi_thr;
    *stop = least_stop;
}

// One thread, one bucket m (clamped to W - 1 for the loads), one staged k: all DP_BAND x DP_BAND
// candidates from DP_BAND + 2 DP_BAND - 1 unconditional loads. kChecked tests each candidate's
// threshold; without it every candidate counts (the block has checked that all thresholds pass).
template <bool kChecked>
__host__ __device__ static inline void dp_bulk_step(const DpBulkStage& s, int m, float acc[DP_BAND][DP_BAND]) {
    int mr = m - s.act_b;
    mr = mr < 0 ? 0 : mr;
    float left[DP_BAND];
    float right[2 * DP_BAND - 1];
#pragma unroll
    for (int p = 0; p < DP_BAND; ++p) left[p] = dp_load(s.left[p] + m);
#pragma unroll
    for (int c = 0; c < 2 * DP_BAND - 1; ++c) right[c] = dp_load(s.right[c] + mr);
#pragma unroll
    for (int p = 0; p < DP_BAND; ++p) {
#pragma unroll
        for (int q = 0; q < DP_BAND; ++q) {
            const float v = dp_ckpt_value(s.sfn[p], right[p + q], left[p]);
            if (!kChecked || m >= s.thr[p][q]) acc[p][q] = dp_fmin(acc[p][q], v);
        }
    }
}

// Last k any pair of the block may use (the union of bulk ranges ends at i0 + DP_BAND - 1 + D - 1).
__host__ __device__ static inline int dp_bulk_k_end(const DpArgs& a, int i0, int band_start) {
    int e = i0 + DP_BAND - 1 + band_start - 1;
    return e < a.n - 1 ? e : a.n - 1;
}

// ------------------------------------------------------------------ diagonal kernel, per thread
// Initial value of (i, j, m): the bulk kernel's partial minimum when the pair has a bulk range,
// combined with the tape candidate.
__host__ __device__ static inline float dp_diag_init(const DpArgs& a, const float* table, int i, int j, int m,
                                                     int band_start, int thr_tape) {
    int lo, hi;
    float best = DP_INF;
    if (dp_bulk_range(i, j, band_start, &lo, &hi)) best = dp_row_ptr(a, table, i, j, true)[m];
    return dp_fmin(best, dp_tape_at(a, table, i, j, m, thr_tape));
}

// Buckets of thread t in block bx: m = bx * T * MPT + t + r * T, r = 0..MPT-1 (coalesced along m).
__host__ __device__ static inline int dp_diag_m(int bx, int t, int r) {
    return bx * (DP_DIAG_THREADS * DP_DIAG_MPT) + t + r * DP_DIAG_THREADS;
}

// One staged k for one thread's buckets m[r] (loads at mload[r] = min(m[r], W - 1)): every load
// of the k is issued before any minimum; a bucket below the threshold keeps its value.
__host__ __device__ static inline void dp_diag_apply(const DpKStage& s, const int m[DP_DIAG_MPT],
                                                     const int mload[DP_DIAG_MPT], float best[DP_DIAG_MPT]) {
    float left[DP_DIAG_MPT], right[DP_DIAG_MPT];
#pragma unroll
    for (int r = 0; r < DP_DIAG_MPT; ++r) {
        int mr = mload[r] - s.act_b;
        mr = mr < 0 ? 0 : mr;
        left[r] = dp_load(s.left + mload[r]);
        right[r] = dp_load(s.right + mr);
    }
#pragma unroll
    for (int r = 0; r < DP_DIAG_MPT; ++r) {
        const float v = dp_ckpt_value(s.sfn, right[r], left[r]);
        if (m[r] >= s.thr) best[r] = dp_fmin(best[r], v);
    }
}

// ------------------------------------------------------------------ recovery
// Each dp_recover block (one per policy walked) visits the states of its policy one after another, in
// recover.recover_policy's order; at each state every thread evaluates its share of the k, the
// block reduces them, and thread 0 decides with recover.choose's tie-break (Tape wins ties, then
// the smallest k) and moves to the next state.

// Lexicographic (value, k) order: the least value, then the smallest k.
__host__ __device__ static inline bool dp_rec_less(float v1, int k1, float v2, int k2) {
    return v1 < v2 || (v1 == v2 && k1 < k2);
}

// Thread t's best allowed checkpoint at (i, j, m): k = i + 1 + t, i + 1 + t + T, ... (< j), as
// (value, k); (+inf, DP_NEVER) when it has none with a finite value. Allowed k are a prefix.
__host__ __device__ static inline void dp_rec_thread(const DpArgs& a, const float* table, int i, int j, int m,
                                                     int t, float* value, int* arg) {
    float best = DP_INF;
    int best_k = DP_NEVER;
    for (int k = i + 1 + t; k < j; k += DP_REC_THREADS) {
        if (m < dp_thr_ckpt(a, i, j, k)) break;
        const float v = dp_ckpt_at(dp_stage_k(a, table, i, j, k), m);
        if (v < best) {  // k increases: ties keep the smaller k
            best = v;
            best_k = k;
        }
    }
    *value = best;
    *arg = best_k;
}

// The tape side of recover.choose at (i, j, m): *allowed whether m reaches the tape threshold,
// and the tape candidate where Tape may be chosen (+inf otherwise). Thread 0 evaluates it before
// its share of the k, so that its loads overlap the block's.
__host__ __device__ static inline float dp_rec_tape(const DpArgs& a, const float* table, int i, int j, int m,
                                                    int* allowed) {
    const int tt = dp_thr_tape(a, i, j);
    *allowed = m >= tt;
    if (j == i + 1) return DP_INF;  // not compared: the only choice
    return (a.multi_tape && m >= tt) ? dp_tape_at(a, table, i, j, m, tt) : DP_INF;
}

// recover.choose at (i, j, m) from dp_rec_tape's (allowed, best_t) and the block's least
// checkpoint (best_k, arg): 0 for Tape, k for checkpoint k, -1 if the state is infeasible.
__host__ __device__ static inline int dp_rec_decide(int i, int j, int tape_allowed, float best_t, float best_k,
                                                    int arg) {
    if (j == i + 1) return tape_allowed ? 0 : -1;
    const float best = best_t < best_k ? best_t : best_k;
    if (!(best < DP_INF)) return -1;
    if (best_t <= best_k) return 0;
    return arg;
}

// Record choice k at (i, j, m) as quad out[count] and move on, in recover_policy's order: its
// left child next (Tape: (i+1, j); checkpoint: (i, k), with (k, j) pushed for later), else the
// top of the stack. Returns 1 with next[] = the next state, 0 when done, -1 for an infeasible
// state, -2 when the buffers are too small. The stack holds 3 ints per entry.
__host__ __device__ static inline int dp_rec_advance(const DpArgs& a, int i, int j, int m, int k, int* out,
                                                     int* count, int max_nodes, int* stack, int* sp, int max_stack,
                                                     int next[3]) {
    if (k < 0) return -1;
    if (*count >= max_nodes) return -2;
    int* q = out + 4 * (*count);
    q[0] = i; q[1] = j; q[2] = m; q[3] = k;
    ++*count;
    if (k == 0 && j > i + 1) {
        next[0] = i + 1; next[1] = j; next[2] = m - a.tape_b[i + 1];
        return 1;
    }
    if (k > 0) {
        if (*sp >= max_stack) return -2;
        int* e = stack + 3 * (*sp);
        e[0] = k; e[1] = j; e[2] = m - a.act_b[k];
        ++*sp;
        next[0] = i; next[1] = k; next[2] = m;
        return 1;
    }
    if (*sp == 0) return 0;
    --*sp;
    const int* e = stack + 3 * (*sp);
    next[0] = e[0]; next[1] = e[1]; next[2] = e[2];
    return 1;
}
