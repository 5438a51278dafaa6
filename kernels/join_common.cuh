// Per-state arithmetic of the heterogeneous join DP J(s, f, m) (gpusolve/join/dp.py), shared by the
// CUDA kernel (join.cu) and the host harness (tests/kernel_host/join_harness.cpp) so that CI checks
// the kernel arithmetic bit for bit without a GPU. Builds on dp_common.cuh (float addition, minimum,
// loads, DpArgs, dp_sfn, dp_row, dp_ckpt_value): the same operations as the chain kernels.
//
// The candidates are those of gpusolve.join.dp._candidates, in its order (the order changes no bit:
// minimums are exact; it is the tie-break order of recovery, which runs on the host):
//   turn            t_turn                                          if m >= need_turn
//   tape of b       t_tape^b[i+1] + J(row + stride_b, m - tape_b^b[i+1])
//                   if m >= ceil(tape_fwd^b[i+1] / B) and m + R >= ceil((tape_need^b[i+1] + O_b) / B)
//   ckpt k of b     (sfn^b(i, k) + J(sub(row, b, k), m - act_b^b[k])) + C^b(i, k, col)
//                   col = min(m + R - ceil(O_b / B), M); if m >= ceil(nograd_peak^b[i][k] / B), col >= 0
// with i = s_b, R = release[row] (buckets), O_b = others[row][b] (bytes), and every float addition
// one round-to-nearest (dp_fadd), every sfn a double subtraction rounded once (dp_sfn), exactly as
// NumPy's float32 arithmetic in _candidates. A J read at m - shift < 0 is +inf there (_shift_rows):
// here that candidate is skipped, which leaves the minimum unchanged. Thresholds are evaluated in
// 64 bits (tape thresholds: one 64-bit division per thread, branch and state, rounded as one sum
// exactly as on the CPU); the checkpoint threshold ceil(p / B) = pq + [pr > 0] reads the quotient
// (clamped to W: never allowed) and remainder arrays peak_q / peak_r of gpusolve.dp.cuda.device_arrays.
// nograd_peak^b[i][.] is a running maximum, so allowed checkpoints are a prefix of k: the loop stops
// at the first k whose threshold exceeds the thread's largest bucket.
//
// Layout. J: one row of W = M + 1 floats per state (s, f), row numbers as JoinProblem (mixed radix
// of u; the top state is row 0). C^b: the chain table of branch b (gpusolve.dp.problem layout, no
// sentinel row) at element offset meta[b][JN_CTAB] of one buffer holding every branch's table.
// Per-branch arrays (t_tape, prefix, act_b, tape_b, tape_fwd, tape_need: l_b + 1 entries at
// meta[b][JN_OFF1]; peak_q, peak_r: (l_b + 1)^2 at meta[b][JN_OFF2]) are concatenated likewise.
// Per-row arrays: u[row][b] (int32), release[row] (int32 buckets), others[row][b] (int64 bytes).
//
// Bit-for-bit caveat (as dp_common.cuh): CuPy compiles with -ftz=true; no time may be subnormal.
//
// NVRTC-compatible: no host headers.
#pragma once

#include "dp_common.cuh"

// ------------------------------------------------------------------ launch geometry
// gpusolve/join/cuda.py (class JoinGeometry) owns these values and prepends them as #define lines to
// the NVRTC source; the tests build the host harness with them as -D options.
#ifndef JN_THREADS
#define JN_THREADS 128   // join_plane: threads per block (one state, buckets along the threads)
#endif
#ifndef JN_MPT
#define JN_MPT 2         // join_plane: buckets per thread
#endif

static_assert(JN_THREADS % 32 == 0 && JN_THREADS <= 1024, "JN_THREADS: a multiple of 32, <= 1024");
static_assert(JN_MPT >= 1, "JN_MPT >= 1");

// Columns of the per-branch meta array (int64[k][JN_META]).
#define JN_LEN 0       // l_b (0: empty branch, nothing to run)
#define JN_MULTI 1     // multi_tape of the branch chain
#define JN_STRIDE 2    // row stride of u_b
#define JN_FLAGGED 3   // 1 when u_b takes the value l_b + 1 (f_b = 1): the turn frees its inputs
#define JN_OFF1 4      // offset of the branch's (l_b + 1)-arrays
#define JN_OFF2 5      // offset of its (l_b + 1)^2-arrays
#define JN_CTAB 6      // element offset of its chain table C^b
#define JN_META 8

struct JnArgs {
    int k;                    // branches
    int width;                // W = M + 1
    dp_i64 bucket;            // B
    int turn_need;            // ceil(turn_need_bytes / B), clamped to W
    float t_turn;             // float32(t_fwd + t_bwd of the turn)
    const int* row_u;         // [rows][k]
    const int* row_release;   // [rows]  R(f) in buckets
    const dp_i64* row_others; // [rows][k]  O_b(s) in bytes
    const dp_i64* meta;       // [k][JN_META]
    const float* t_tape;
    const double* prefix;
    const int* act_b;
    const int* tape_b;
    const dp_i64* tape_fwd;
    const dp_i64* tape_need;
    const int* peak_q;
    const dp_i64* peak_r;
};

// Branch b as a chain instance of dp_common.cuh (the fields the join reads; no grad arrays).
__host__ __device__ static inline DpArgs jn_branch(const JnArgs& a, int b) {
    const dp_i64* bm = a.meta + (dp_i64)b * JN_META;
    const dp_i64 o1 = bm[JN_OFF1], o2 = bm[JN_OFF2];
    DpArgs c;
    c.n = (int)bm[JN_LEN];
    c.width = a.width;
    c.multi_tape = (int)bm[JN_MULTI];
    c.bucket = a.bucket;
    c.t_tape = a.t_tape + o1;
    c.prefix = a.prefix + o1;
    c.act_b = a.act_b + o1;
    c.tape_b = a.tape_b + o1;
    c.grad_q = 0;
    c.grad_r = 0;
    c.peak_q = a.peak_q + o2;
    c.peak_r = a.peak_r + o2;
    c.tape_fwd = a.tape_fwd + o1;
    c.tape_need = a.tape_need + o1;
    c.grad_bytes = 0;
    return c;
}

// ceil(x / B) for x >= 0 (NumPy's -(-x // B)).
__host__ __device__ static inline dp_i64 jn_ceil(dp_i64 x, dp_i64 bucket) {
    return (x + bucket - 1) / bucket;
}

// ceil(nograd_peak[i][k] / B) from quotient (clamped to W) and remainder.
__host__ __device__ static inline int jn_thr_ckpt(const DpArgs& c, int i, int k) {
    const dp_i64 pi = (dp_i64)i * (c.n + 1) + k;
    return c.peak_q[pi] + (c.peak_r[pi] > 0 ? 1 : 0);
}

// Buckets of thread t in block column by: m = by * T * MPT + t + r * T (coalesced along m).
__host__ __device__ static inline int jn_m(int by, int t, int r) {
    return by * (JN_THREADS * JN_MPT) + t + r * JN_THREADS;
}

// The value of state ``row`` at the thread's buckets mload[r] (each < W, increasing in r): the
// minimum over every candidate of _candidates, +inf where none is allowed. Reads J only at rows of
// higher hyperplanes and the chain tables (Note [Hyperplanes] in gpusolve/join/dp.py).
__host__ __device__ static inline void jn_state_values(const JnArgs& a, const float* J, const float* ctab,
                                                       dp_i64 row, const int mload[JN_MPT], float best[JN_MPT]) {
    const dp_i64 width = a.width;
    const int* u = a.row_u + row * a.k;
    const int my_max = mload[JN_MPT - 1];
#pragma unroll
    for (int r = 0; r < JN_MPT; ++r) best[r] = DP_INF;
    bool at_turn = true;
    for (int b = 0; b < a.k; ++b) at_turn = at_turn && u[b] >= (int)a.meta[(dp_i64)b * JN_META + JN_LEN];
    if (at_turn) {
#pragma unroll
        for (int r = 0; r < JN_MPT; ++r)
            if (mload[r] >= a.turn_need) best[r] = dp_fmin(best[r], a.t_turn);
    }
    const dp_i64 release = a.row_release[row];
    for (int b = 0; b < a.k; ++b) {
        const dp_i64* bm = a.meta + (dp_i64)b * JN_META;
        const int len = (int)bm[JN_LEN];
        const int i = u[b];  // s_b = u_b while s_b < l_b
        if (i >= len) continue;
        const DpArgs c = jn_branch(a, b);
        const dp_i64 others = a.row_others[row * a.k + b];
        const dp_i64 stride = bm[JN_STRIDE];
        if (c.multi_tape) {
            const dp_i64 thr_fwd = jn_ceil(c.tape_fwd[i + 1], a.bucket);
            const dp_i64 thr_bwd = jn_ceil(c.tape_need[i + 1] + others, a.bucket);  // one sum, rounded once
            const float* sub = J + (row + stride) * width;
            const int shift = c.tape_b[i + 1];
            const float tt = c.t_tape[i + 1];
#pragma unroll
            for (int r = 0; r < JN_MPT; ++r) {
                const int mr = mload[r] - shift;
                if (mload[r] >= thr_fwd && mload[r] + release >= thr_bwd && mr >= 0)
                    best[r] = dp_fmin(best[r], dp_fadd(tt, dp_load(sub + mr)));
            }
        }
        const dp_i64 ocol = jn_ceil(others, a.bucket);
        const float* cbase = ctab + bm[JN_CTAB];
        for (int kk = i + 1; kk <= len; ++kk) {
            const int thr = jn_thr_ckpt(c, i, kk);
            if (thr > my_max) break;  // nondecreasing in k
            const int target = (kk == len && bm[JN_FLAGGED]) ? len + 1 : kk;
            const float* right = J + (row + (dp_i64)(target - i) * stride) * width;
            const float* left = cbase + dp_row(len, i, kk) * width;
            const float sfn = dp_sfn(c, i, kk);
            const int act = c.act_b[kk];
#pragma unroll
            for (int r = 0; r < JN_MPT; ++r) {
                dp_i64 col = (dp_i64)mload[r] + release - ocol;
                col = col < width - 1 ? col : width - 1;
                const int mr = mload[r] - act;
                if (mload[r] >= thr && col >= 0 && mr >= 0)
                    best[r] = dp_fmin(best[r], dp_ckpt_value(sfn, dp_load(right + mr), dp_load(left + col)));
            }
        }
    }
}
