// Per-state arithmetic of the combined recompute + offload DP C(i, j, m, sigma) (gpusolve/offload/dp.py,
// spec offload.md B.4.1), shared by the CUDA kernel (offload.cu) and the host harness
// (tests/kernel_host/offload_harness.cpp) so that CI checks the kernel arithmetic bit for bit without a
// GPU. Builds on dp_common.cuh (dp_fadd, dp_fmin, dp_load, DpArgs, dp_row, dp_sfn, dp_thr_ckpt,
// dp_thr_tape, dp_tape_at, dp_ckpt_value): the chain kernels' operations, so every candidate the two DPs
// share is computed by the same statement.
//
// The candidates, in gpusolve.offload.dp.solve_tables' float order (each float addition one
// round-to-nearest, dp_fadd; minimums exact, dp_fmin, so their order changes no bit):
//   Tape          dp_tape_at on plane 0, for both planes          m >= thr_tape(i, j)
//   Checkpoint k  (sfn(i, k) + C(k, j, m - act_b[k], 1)) + C(i, k, m, sigma)     m >= thr_ckpt(i, j, k)
//   Swap k        (((w_off[i][k] + C(k, j, col, 1)) + e) + C(i, k, m, 1)         sigma = 1, same threshold
//                 col = min(M, m - act_b[k] + act_b[i]) (>= 0 where allowed: thr_ckpt >= act_b[k])
//                 e   = e_overlap[i][k] if m - act_b[k] >= pre_b[k+1] else e_full[i]
// w_off, e_overlap, e_full are gpusolve.offload.dp.SwapArrays' float32 arrays (computed in float64 on
// the host from the exact bytes and rounded once there: the kernel only adds them); pre_b is SwapArrays'
// pre_b as int32, clamped to W (it is compared with m - act_b[k] <= M only, so the clamp keeps every
// comparison). A useless link gives w_off = e = +inf: every Swap candidate is +inf, never NaN (no
// value is ever subtracted on the device). So does a row i whose a_i may not be swapped (w_off[i][*]
// = +inf: Chain.swappable, an output sharing a storage with another).
//
// Tie-break (Tape, then the smallest checkpoint k, then the smallest swap k) is recovery's, on the host
// (gpusolve.offload.dp.choose over on-demand reads of the device planes): the fill only needs values.
//
// Allowed checkpoints and swaps share thr_ckpt, nondecreasing in k: a prefix of k, so the k loop stops
// at the first k whose threshold exceeds the thread's (and, block-uniformly, the block's) last bucket.
//
// Layout: two planes (sigma = 0, then sigma = 1), each the chain table layout of problem.py (one row of
// W = M + 1 floats per pair, rows by diagonal then i: dp_row), plane s at element s * P * W with
// P = N (N + 1) / 2 pairs. No sentinel row: every read is of a state of a lower diagonal, checked
// allowed first (or clamped into its row for threads past the last bucket, whose values are dropped).
//
// Bit-for-bit caveat (as dp_common.cuh): CuPy compiles with -ftz=true; no time may be subnormal.
//
// NVRTC-compatible: no host headers.
#pragma once

#include "dp_common.cuh"

// ------------------------------------------------------------------ launch geometry
// gpusolve/offload/cuda.py (class OffloadGeometry) owns these values and prepends them as #define lines
// to the NVRTC source; the tests build the host harness with them as -D options.
#ifndef OL_THREADS
#define OL_THREADS 128   // offload_diag: threads per block (one pair, buckets along the threads)
#endif
#ifndef OL_MPT
#define OL_MPT 2         // offload_diag: buckets per thread
#endif
#ifndef OL_KTILE
#define OL_KTILE 32      // offload_diag: k values staged per tile
#endif

static_assert(OL_THREADS % 32 == 0 && OL_THREADS <= 1024, "OL_THREADS: a multiple of 32, <= 1024");
static_assert(OL_MPT >= 1, "OL_MPT >= 1");
static_assert(OL_KTILE >= 1 && OL_KTILE <= OL_THREADS, "OL_KTILE in [1, OL_THREADS]");

// The chain instance (dp_common.cuh) and the swap terms.
struct OlArgs {
    DpArgs c;
    const float* w_off;      // [(N+1)^2]  max(sfn(i, k), tau_d2h(act[i])), float32
    const float* e_overlap;  // [(N+1)^2]  max(0, tau_h2d(act[i]) - t_bwd[k+1]), float32
    const float* e_full;     // [N+1]      tau_h2d(act[i]), float32
    const int* pre_b;        // [N+2]      SwapArrays.pre_b, clamped to W
};

// Start of row (i, j) of plane s.
__host__ __device__ static inline dp_i64 ol_row_offset(const OlArgs& a, int s, int i, int j) {
    return ((dp_i64)s * dp_sentinel_row(a.c.n) + dp_row(a.c.n, i, j)) * (dp_i64)a.c.width;
}

// One k of pair (i, j): row bases of the three sub-problem rows it reads and its scalars, hoisted out
// of the bucket loop (staged in shared memory by the kernel).
struct OlKStage {
    const float* left0;   // (i, k), plane 0
    const float* left1;   // (i, k), plane 1
    const float* right1;  // (k, j), plane 1
    float sfn;
    float w_off;
    float e_overlap;
    int act_b;            // act_b[k]
    int pre_b;            // pre_b[k + 1]
    int thr;              // thr_ckpt(i, j, k)
    int k;
};

__host__ __device__ static inline OlKStage ol_stage_k(const OlArgs& a, const float* planes, int i, int j, int k) {
    OlKStage s;
    s.left0 = planes + ol_row_offset(a, 0, i, k);
    s.left1 = planes + ol_row_offset(a, 1, i, k);
    s.right1 = planes + ol_row_offset(a, 1, k, j);
    const dp_i64 ik = (dp_i64)i * (a.c.n + 1) + k;
    s.sfn = dp_sfn(a.c, i, k);
    s.w_off = a.w_off[ik];
    s.e_overlap = a.e_overlap[ik];
    s.act_b = a.c.act_b[k];
    s.pre_b = a.pre_b[k + 1];
    s.thr = dp_thr_ckpt(a.c, i, j, k);
    s.k = k;
    return s;
}

// The k loop's exits (thresholds are nondecreasing in k): the block leaves when the first k of a staged
// tile is above its largest bucket (block-uniform), a thread when a k is above its own largest bucket.
__host__ __device__ static inline bool ol_block_stops(const OlKStage& first, int block_max) {
    return first.thr > block_max;
}

__host__ __device__ static inline bool ol_thread_stops(const OlKStage& s, int my_max) {
    return s.thr > my_max;
}

// Buckets of thread t in block bx: m = bx * T * MPT + t + r * T, r = 0..MPT-1 (coalesced along m).
__host__ __device__ static inline int ol_m(int bx, int t, int r) {
    return bx * (OL_THREADS * OL_MPT) + t + r * OL_THREADS;
}

// Initial values of (i, j) at the thread's buckets: the tape candidate (plane 0's, on both planes).
__host__ __device__ static inline void ol_init(const OlArgs& a, const float* planes, int i, int j, int thr_tape,
                                               const int m[OL_MPT], float best0[OL_MPT], float best1[OL_MPT]) {
#pragma unroll
    for (int r = 0; r < OL_MPT; ++r) {
        const float v = m[r] < a.c.width ? dp_tape_at(a.c, planes, i, j, m[r], thr_tape) : DP_INF;
        best0[r] = v;
        best1[r] = v;
    }
}

// One staged k for one thread's buckets m[r] (loads at mload[r] = min(m[r], W - 1)): the checkpoint
// candidate on both planes and the swap candidate on plane 1; every load is issued before any minimum,
// a bucket below the threshold keeps its values. act_i = act_b[i], e_full_i = e_full[i].
__host__ __device__ static inline void ol_apply(const OlKStage& s, int act_i, float e_full_i, int width,
                                                const int m[OL_MPT], const int mload[OL_MPT], float best0[OL_MPT],
                                                float best1[OL_MPT]) {
    float left0[OL_MPT], left1[OL_MPT], right[OL_MPT], swap_right[OL_MPT];
    int room[OL_MPT];
#pragma unroll
    for (int r = 0; r < OL_MPT; ++r) {
        room[r] = mload[r] - s.act_b;
        const int mr = room[r] < 0 ? 0 : room[r];       // never negative where allowed; guards the read
        int col = room[r] + act_i;                       // a_i's bucket back to the right part ...
        col = col < 0 ? 0 : (col > width - 1 ? width - 1 : col);  // ... clamped to M
        left0[r] = dp_load(s.left0 + mload[r]);
        left1[r] = dp_load(s.left1 + mload[r]);
        right[r] = dp_load(s.right1 + mr);
        swap_right[r] = dp_load(s.right1 + col);
    }
#pragma unroll
    for (int r = 0; r < OL_MPT; ++r) {
        const float base = dp_fadd(s.sfn, right[r]);
        const float ck0 = dp_fadd(base, left0[r]);
        const float ck1 = dp_fadd(base, left1[r]);
        const float e = room[r] >= s.pre_b ? s.e_overlap : e_full_i;
        const float sw = dp_fadd(dp_fadd(dp_fadd(s.w_off, swap_right[r]), e), left1[r]);
        if (m[r] >= s.thr) {
            best0[r] = dp_fmin(best0[r], ck0);
            best1[r] = dp_fmin(best1[r], dp_fmin(ck1, sw));
        }
    }
}

// The thread's results: (i, j) at its buckets below W, plane 0 and plane 1.
__host__ __device__ static inline void ol_store(const OlArgs& a, float* planes, int i, int j, const int m[OL_MPT],
                                                const float best0[OL_MPT], const float best1[OL_MPT]) {
    float* out0 = planes + ol_row_offset(a, 0, i, j);
    float* out1 = planes + ol_row_offset(a, 1, i, j);
#pragma unroll
    for (int r = 0; r < OL_MPT; ++r) {
        if (m[r] < a.c.width) {
            out0[m[r]] = best0[r];
            out1[m[r]] = best1[r];
        }
    }
}
