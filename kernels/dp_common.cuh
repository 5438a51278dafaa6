// Per-state arithmetic of the checkpointing DP, shared by the CUDA kernels (dp.cu) and the host
// harness (tests/kernel_host/harness.cpp) so that CI can check the kernel arithmetic without a GPU.
//
// The recurrences, thresholds and float operation order are those of gpusolve/dp/problem.py:
//   tape(i, j, m)     = t_tape[i+1] + C(i+1, j, m - tape_b[i+1])      (j > i+1; = t_tape[i+1] at j = i+1)
//   ckpt(i, j, k, m)  = (sfn(i, k) + C(k, j, m - act_b[k])) + C(i, k, m)
//   sfn(i, k)         = (float)(prefix[k] - prefix[i])                (double subtraction, then rounding)
// each float addition is a separate round-to-nearest (__fadd_rn on the device, so nothing is
// contracted; the host harness is built with -ffp-contract=off and SSE arithmetic).
//
// Table: one row of W = M + 1 floats per pair, rows ordered by diagonal d = j - i, then by i:
//   row(i, j) = diag_offset(d) + i,  diag_offset(d) = (d - 1)(N + 1) - (d - 1) d / 2.
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

#define DP_INF (__int_as_float_compat(0x7f800000))

// Threads per block and buckets per thread of the diagonal kernel; k values staged per tile.
#define DP_DIAG_THREADS 128
#define DP_DIAG_MPT 4
#define DP_KTILE 32
// Bulk (min-plus) kernel: a band of DP_BAND diagonals, DP_BAND x DP_BAND pairs per block,
// one bucket per thread; k values staged per tile.
#define DP_BAND 8
#define DP_BULK_THREADS 128
#define DP_BULK_KTILE 4
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

__host__ __device__ static inline float dp_fmin(float a, float b) { return b < a ? b : a; }

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

// Checkpoints whose contribution the bulk kernel of band start D computes for pair (i, j):
// k in [j - D + 1, i + D - 1] (both sub-pairs on diagonals < D). Returns 0 when empty / no band.
__host__ __device__ static inline int dp_bulk_range(int i, int j, int band_start, int* lo, int* hi) {
    if (band_start <= 0) return 0;
    *lo = j - band_start + 1;
    *hi = i + band_start - 1;
    return *lo <= *hi;
}

// ------------------------------------------------------------------ diagonal kernel pieces
// Scalars of one checkpoint k for the block's pair (i, j), staged in shared memory.
struct DpKStage {
    float sfn;
    int act_b;
    int thr;
    int k;
};

__host__ __device__ static inline DpKStage dp_stage_k(const DpArgs& a, int i, int j, int k) {
    DpKStage s;
    s.sfn = dp_sfn(a, i, k);
    s.act_b = a.act_b[k];
    s.thr = dp_thr_ckpt(a, i, j, k);
    s.k = k;
    return s;
}

// Candidate k at bucket m for pair (i, j) (the caller has checked m >= s.thr).
__host__ __device__ static inline float dp_ckpt_at(const DpArgs& a, const float* table, const DpKStage& s,
                                                   int i, int j, int m) {
    const dp_i64 w = a.width;
    int mr = m - s.act_b;
    mr = mr < 0 ? 0 : mr;  // never negative where allowed (thr >= act_b); guards the read
    const float right = table[dp_row(a.n, s.k, j) * w + mr];
    const float left = table[dp_row(a.n, i, s.k) * w + m];
    return dp_ckpt_value(s.sfn, right, left);
}

// Tape candidate at (i, j, m); +inf where not allowed.
__host__ __device__ static inline float dp_tape_at(const DpArgs& a, const float* table, int i, int j, int m,
                                                   int thr_tape) {
    if (m < thr_tape) return DP_INF;
    if (j == i + 1) return a.t_tape[i + 1];
    if (!a.multi_tape) return DP_INF;
    int mr = m - a.tape_b[i + 1];
    mr = mr < 0 ? 0 : mr;
    return dp_fadd(a.t_tape[i + 1], table[dp_row(a.n, i + 1, j) * (dp_i64)a.width + mr]);
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
// sfn per p, a threshold per (p, q) (DP_NEVER outside the pair's bulk range), the least of those
// (threads below it skip k) and stop_thr: the least true threshold at k over pairs whose range is
// not finished (0 while some pair has i >= k). Thresholds being nondecreasing in k, a block whose
// largest bucket is below stop_thr has nothing left to do.
struct DpBulkStage {
    int k;
    int act_b;
    int min_thr;
    int stop_thr;
    float sfn[DP_BAND];
    int thr[DP_BAND][DP_BAND];
};

__host__ __device__ static inline int dp_bulk_pair_live(const DpArgs& a, int i0, int band_start, int band_len,
                                                        int p, int q) {
    const int j = i0 + p + band_start + q;
    return q < band_len && j <= a.n;
}

// Scalars of the stage that do not depend on (p, q); min_thr and stop_thr start at DP_NEVER.
__host__ __device__ static inline void dp_bulk_stage_head(const DpArgs& a, int i0, int k, DpBulkStage* s) {
    s->k = k;
    s->act_b = (k <= a.n) ? a.act_b[k] : 0;
    s->min_thr = DP_NEVER;
    s->stop_thr = DP_NEVER;
    for (int p = 0; p < DP_BAND; ++p) {
        const int i = i0 + p;
        s->sfn[p] = (k > i && k <= a.n) ? dp_sfn(a, i, k) : 0.0f;
    }
}

// Threshold entry (p, q) at k; *stop receives the pair's contribution to stop_thr.
__host__ __device__ static inline int dp_bulk_thr_entry(const DpArgs& a, int i0, int band_start, int band_len,
                                                        int k, int p, int q, int* stop) {
    *stop = DP_NEVER;
    if (!dp_bulk_pair_live(a, i0, band_start, band_len, p, q)) return DP_NEVER;
    const int i = i0 + p;
    const int j = i + band_start + q;
    int lo, hi;
    if (!dp_bulk_range(i, j, band_start, &lo, &hi) || k > hi) return DP_NEVER;
    if (k <= i) {
        *stop = 0;
        return DP_NEVER;
    }
    const int t = dp_thr_ckpt(a, i, j, k);
    *stop = t;
    if (k < lo || t >= a.width) return DP_NEVER;
    return t;
}

// One thread, one bucket m, one staged k: update the DP_BAND x DP_BAND accumulators.
__host__ __device__ static inline void dp_bulk_apply(const DpArgs& a, const float* table, const DpBulkStage& s,
                                                     int i0, int band_start, int m, float acc[DP_BAND][DP_BAND]) {
    if (m < s.min_thr) return;
    const dp_i64 w = a.width;
    int mr = m - s.act_b;
    mr = mr < 0 ? 0 : mr;
    float left[DP_BAND];
    float right[2 * DP_BAND - 1];
#pragma unroll
    for (int p = 0; p < DP_BAND; ++p) {
        const int i = i0 + p;
        left[p] = (s.k > i && s.k <= a.n) ? table[dp_row(a.n, i, s.k) * w + m] : DP_INF;
    }
#pragma unroll
    for (int c = 0; c < 2 * DP_BAND - 1; ++c) {
        const int j = i0 + band_start + c;
        right[c] = (j > s.k && j <= a.n) ? table[dp_row(a.n, s.k, j) * w + mr] : DP_INF;
    }
#pragma unroll
    for (int p = 0; p < DP_BAND; ++p) {
#pragma unroll
        for (int q = 0; q < DP_BAND; ++q) {
            if (m >= s.thr[p][q]) {
                acc[p][q] = dp_fmin(acc[p][q], dp_ckpt_value(s.sfn[p], right[p + q], left[p]));
            }
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
    if (dp_bulk_range(i, j, band_start, &lo, &hi)) best = table[dp_row(a.n, i, j) * (dp_i64)a.width + m];
    return dp_fmin(best, dp_tape_at(a, table, i, j, m, thr_tape));
}

// Buckets of thread t in block bx: m = bx * T * MPT + t + r * T, r = 0..MPT-1 (coalesced along m).
__host__ __device__ static inline int dp_diag_m(int bx, int t, int r) {
    return bx * (DP_DIAG_THREADS * DP_DIAG_MPT) + t + r * DP_DIAG_THREADS;
}

// One staged k for one thread's buckets (ascending in r): stops at the first bucket below thr.
__host__ __device__ static inline void dp_diag_apply(const DpArgs& a, const float* table, const DpKStage& s,
                                                     int i, int j, int bx, int t, float best[DP_DIAG_MPT]) {
#pragma unroll
    for (int r = DP_DIAG_MPT - 1; r >= 0; --r) {
        const int m = dp_diag_m(bx, t, r);
        if (m < s.thr) break;
        if (m < a.width) best[r] = dp_fmin(best[r], dp_ckpt_at(a, table, s, i, j, m));
    }
}

// ------------------------------------------------------------------ recovery
// recover.choose at (i, j, m): 0 for Tape, k for checkpoint k, -1 if infeasible. Same candidate
// values and tie-break (Tape wins ties, then the smallest k).
__host__ __device__ static inline int dp_choose(const DpArgs& a, const float* table, int i, int j, int m) {
    const int tt = dp_thr_tape(a, i, j);
    if (j == i + 1) return m >= tt ? 0 : -1;
    float best_k = DP_INF;
    int arg = -1;
    for (int k = i + 1; k < j; ++k) {
        if (m < dp_thr_ckpt(a, i, j, k)) continue;
        DpKStage s = dp_stage_k(a, i, j, k);
        const float v = dp_ckpt_at(a, table, s, i, j, m);
        if (arg < 0 || v < best_k) {
            best_k = v;
            arg = k;
        }
    }
    float best_t = DP_INF;
    const int tape_ok = a.multi_tape && m >= tt;
    if (tape_ok) best_t = dp_tape_at(a, table, i, j, m, tt);
    const float best = best_t < best_k ? best_t : best_k;
    if (!(best < DP_INF)) return -1;
    if (best_t <= best_k) return 0;
    return arg;
}

// Walk the optimal policy from (0, N, m_top) with an explicit stack, in the visiting order of
// recover.recover_policy; writes (i, j, m, k) quads to out, returns their count (-1: infeasible
// state met, -2: buffers too small). stack holds 3 ints per entry.
__host__ __device__ static inline int dp_recover(const DpArgs& a, const float* table, int m_top, int* out,
                                                 int max_nodes, int* stack, int max_stack) {
    int sp = 0;
    int count = 0;
    stack[0] = 0; stack[1] = a.n; stack[2] = m_top;
    sp = 1;
    while (sp > 0) {
        --sp;
        const int i = stack[3 * sp], j = stack[3 * sp + 1], m = stack[3 * sp + 2];
        const int k = dp_choose(a, table, i, j, m);
        if (k < 0) return -1;
        if (count >= max_nodes) return -2;
        out[4 * count] = i; out[4 * count + 1] = j; out[4 * count + 2] = m; out[4 * count + 3] = k;
        ++count;
        if (k == 0) {
            if (j > i + 1) {
                if (sp >= max_stack) return -2;
                stack[3 * sp] = i + 1; stack[3 * sp + 1] = j; stack[3 * sp + 2] = m - a.tape_b[i + 1];
                ++sp;
            }
        } else {
            if (sp + 2 > max_stack) return -2;
            stack[3 * sp] = k; stack[3 * sp + 1] = j; stack[3 * sp + 2] = m - a.act_b[k];
            ++sp;
            stack[3 * sp] = i; stack[3 * sp + 1] = k; stack[3 * sp + 2] = m;
            ++sp;
        }
    }
    return count;
}
