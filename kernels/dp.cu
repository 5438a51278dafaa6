// CUDA kernels of the checkpointing DP (see dp_common.cuh for the arithmetic and the layout).
//
// Launch sequence (gpusolve/dp/cuda.py, launch_plan): diagonals d = 1..N in order; for each band
// of DP_BAND diagonals starting at D (D >= 2 DP_BAND), first dp_bulk computes, for every pair of
// the band, the minimum over the checkpoints whose two sub-pairs lie on diagonals < D (a min-plus
// product with DP_BAND x DP_BAND register tiles: each loaded value feeds DP_BAND candidates), then
// dp_diag runs once per diagonal of the band for the remaining (edge) checkpoints and the tape.
// Below the first band dp_diag does every checkpoint. dp_recover walks the policy (one thread).
//
// Compiles with NVRTC (cupy.RawModule) and with `nvcc --ptx`; include path: this directory.
#include "dp_common.cuh"

#define DP_PARAMS                                                                                    \
    const float* __restrict__ t_tape, const double* __restrict__ prefix, const int* __restrict__ act_b, \
    const int* __restrict__ tape_b, const int* __restrict__ grad_q, const long long* __restrict__ grad_r, \
    const int* __restrict__ peak_q, const long long* __restrict__ peak_r,                              \
    const long long* __restrict__ tape_fwd, const long long* __restrict__ tape_need,                   \
    const long long* __restrict__ grad_bytes, int n, int width, int multi_tape, long long bucket

__device__ static inline DpArgs dp_make_args(const float* t_tape, const double* prefix, const int* act_b,
                                             const int* tape_b, const int* grad_q, const long long* grad_r,
                                             const int* peak_q, const long long* peak_r, const long long* tape_fwd,
                                             const long long* tape_need, const long long* grad_bytes, int n,
                                             int width, int multi_tape, long long bucket) {
    DpArgs a;
    a.n = n;
    a.width = width;
    a.multi_tape = multi_tape;
    a.bucket = bucket;
    a.t_tape = t_tape;
    a.prefix = prefix;
    a.act_b = act_b;
    a.tape_b = tape_b;
    a.grad_q = grad_q;
    a.grad_r = grad_r;
    a.peak_q = peak_q;
    a.peak_r = peak_r;
    a.tape_fwd = tape_fwd;
    a.tape_need = tape_need;
    a.grad_bytes = grad_bytes;
    return a;
}

#define DP_ARGS dp_make_args(t_tape, prefix, act_b, tape_b, grad_q, grad_r, peak_q, peak_r, tape_fwd, \
                             tape_need, grad_bytes, n, width, multi_tape, bucket)

// Diagonal d: grid (ceil(W / (T * MPT)), N + 1 - d), block T. Block (bx, i) owns pair (i, i + d)
// and buckets dp_diag_m(bx, t, r). Per-k scalars are staged in shared memory DP_KTILE at a time;
// the block leaves as soon as the staged threshold exceeds its largest bucket (thresholds are
// nondecreasing in k), each thread as soon as it exceeds its own.
extern "C" __global__ void __launch_bounds__(DP_DIAG_THREADS)
dp_diag(float* __restrict__ table, DP_PARAMS, int d, int band_start) {
    const DpArgs a = DP_ARGS;
    __shared__ DpKStage stage[DP_KTILE];
    const int i = blockIdx.y;
    const int j = i + d;
    const int bx = blockIdx.x;
    const int t = threadIdx.x;
    const int thr_tape = dp_thr_tape(a, i, j);
    float best[DP_DIAG_MPT];
#pragma unroll
    for (int r = 0; r < DP_DIAG_MPT; ++r) {
        const int m = dp_diag_m(bx, t, r);
        best[r] = m < width ? dp_diag_init(a, table, i, j, m, band_start, thr_tape) : DP_INF;
    }
    int block_max = dp_diag_m(bx, DP_DIAG_THREADS - 1, DP_DIAG_MPT - 1);
    block_max = block_max < width - 1 ? block_max : width - 1;
    int seg_lo[2], seg_hi[2];
    const int nseg = dp_edge_segments(i, j, band_start, seg_lo, seg_hi);
    bool done = false;
    for (int sg = 0; sg < nseg && !done; ++sg) {
        for (int kb = seg_lo[sg]; kb <= seg_hi[sg]; kb += DP_KTILE) {
            const int cnt = min(DP_KTILE, seg_hi[sg] - kb + 1);
            __syncthreads();
            if (t < cnt) stage[t] = dp_stage_k(a, i, j, kb + t);
            __syncthreads();
            if (stage[0].thr > block_max) {  // block-uniform
                done = true;
                break;
            }
            for (int kk = 0; kk < cnt; ++kk) {
                if (stage[kk].thr > dp_diag_m(bx, t, DP_DIAG_MPT - 1)) break;
                dp_diag_apply(a, table, stage[kk], i, j, bx, t, best);
            }
        }
    }
    const long long base = dp_row(n, i, j) * (long long)width;
#pragma unroll
    for (int r = 0; r < DP_DIAG_MPT; ++r) {
        const int m = dp_diag_m(bx, t, r);
        if (m < width) table[base + m] = best[r];
    }
}

// Band [D, D + len): grid (ceil(W / BT), ceil((N + 1 - D) / DP_BAND)), block BT threads, one bucket
// m = bx * BT + t per thread, pairs (i0 + p, i0 + p + D + q) in registers. Writes the partial
// minimum (+inf where no bulk checkpoint is allowed) of every live pair.
extern "C" __global__ void __launch_bounds__(DP_BULK_THREADS)
dp_bulk(float* __restrict__ table, DP_PARAMS, int band_start, int band_len) {
    const DpArgs a = DP_ARGS;
    __shared__ DpBulkStage stage[DP_BULK_KTILE];
    const int i0 = blockIdx.y * DP_BAND;
    const int t = threadIdx.x;
    const int m = blockIdx.x * DP_BULK_THREADS + t;
    int block_max = blockIdx.x * DP_BULK_THREADS + DP_BULK_THREADS - 1;
    block_max = block_max < width - 1 ? block_max : width - 1;
    float acc[DP_BAND][DP_BAND];
#pragma unroll
    for (int p = 0; p < DP_BAND; ++p)
#pragma unroll
        for (int q = 0; q < DP_BAND; ++q) acc[p][q] = DP_INF;
    const int k_end = dp_bulk_k_end(a, i0, band_start);
    for (int kb = i0 + 1; kb <= k_end; kb += DP_BULK_KTILE) {
        const int cnt = min(DP_BULK_KTILE, k_end - kb + 1);
        __syncthreads();
        if (t < cnt) dp_bulk_stage_head(a, i0, kb + t, &stage[t]);
        __syncthreads();
        for (int e = t; e < cnt * DP_BAND * DP_BAND; e += DP_BULK_THREADS) {
            const int kk = e / (DP_BAND * DP_BAND);
            const int p = (e / DP_BAND) % DP_BAND;
            const int q = e % DP_BAND;
            int stop;
            const int thr = dp_bulk_thr_entry(a, i0, band_start, band_len, kb + kk, p, q, &stop);
            stage[kk].thr[p][q] = thr;
            atomicMin(&stage[kk].min_thr, thr);
            atomicMin(&stage[kk].stop_thr, stop);
        }
        __syncthreads();
        if (stage[0].stop_thr > block_max) break;  // block-uniform
        if (m < width) {
            for (int kk = 0; kk < cnt; ++kk) dp_bulk_apply(a, table, stage[kk], i0, band_start, m, acc);
        }
    }
    if (m < width) {
#pragma unroll
        for (int p = 0; p < DP_BAND; ++p)
#pragma unroll
            for (int q = 0; q < DP_BAND; ++q) {
                const int i = i0 + p;
                int lo, hi;
                if (dp_bulk_pair_live(a, i0, band_start, band_len, p, q) &&
                    dp_bulk_range(i, i + band_start + q, band_start, &lo, &hi))
                    table[dp_row(n, i, i + band_start + q) * (long long)width + m] = acc[p][q];
            }
    }
}

// One thread: the policy at m_top as (i, j, m, k) quads in recover_policy's visiting order.
// result[0] = count (or -1: infeasible state, -2: buffers too small).
extern "C" __global__ void dp_recover_kernel(const float* __restrict__ table, DP_PARAMS, int m_top,
                                             int* __restrict__ out, int max_nodes, int* __restrict__ stack,
                                             int max_stack, int* __restrict__ result) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const DpArgs a = DP_ARGS;
    result[0] = dp_recover(a, table, m_top, out, max_nodes, stack, max_stack);
}
