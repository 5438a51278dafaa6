// CUDA kernels of the checkpointing DP (see dp_common.cuh for the arithmetic, the layout and the
// launch geometry, which gpusolve/dp/cuda.py injects as #defines).
//
// Launch sequence (gpusolve/dp/cuda.py, launch_plan): diagonals d = 1..N in order; for each band
// of DP_BAND diagonals starting at D (D >= 2 DP_BAND), first dp_bulk computes, for every pair of
// the band, the minimum over the checkpoints whose two sub-pairs lie on diagonals < D (a min-plus
// product with DP_BAND x DP_BAND register tiles: each loaded value feeds DP_BAND candidates), then
// dp_diag runs once per diagonal of the band for the remaining (edge) checkpoints and the tape.
// Below the first band dp_diag does every checkpoint. dp_recover then walks policies (one block each).
// The table has one +inf sentinel row after the last pair (the host fills it before the launches).
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
// and buckets dp_diag_m(bx, t, r). Per-k scalars and row bases are staged in shared memory
// DP_KTILE at a time; the block leaves as soon as the staged threshold exceeds its largest bucket
// (thresholds are nondecreasing in k), each thread as soon as it exceeds its own.
extern "C" __global__ void __launch_bounds__(DP_DIAG_THREADS)
dp_diag(float* __restrict__ table, DP_PARAMS, int d, int band_start) {
    const DpArgs a = DP_ARGS;
    __shared__ DpKStage stage[DP_KTILE];
    const int i = blockIdx.y;
    const int j = i + d;
    const int bx = blockIdx.x;
    const int t = threadIdx.x;
    const int thr_tape = dp_thr_tape(a, i, j);
    int m[DP_DIAG_MPT], mload[DP_DIAG_MPT];
    float best[DP_DIAG_MPT];
#pragma unroll
    for (int r = 0; r < DP_DIAG_MPT; ++r) {
        m[r] = dp_diag_m(bx, t, r);
        mload[r] = m[r] < width ? m[r] : width - 1;
        best[r] = m[r] < width ? dp_diag_init(a, table, i, j, m[r], band_start, thr_tape) : DP_INF;
    }
    int block_max = dp_diag_m(bx, DP_DIAG_THREADS - 1, DP_DIAG_MPT - 1);
    block_max = block_max < width - 1 ? block_max : width - 1;
    const int my_max = mload[DP_DIAG_MPT - 1];
    int seg_lo[2], seg_hi[2];
    const int nseg = dp_edge_segments(i, j, band_start, seg_lo, seg_hi);
    bool done = false;
    for (int sg = 0; sg < nseg && !done; ++sg) {
        for (int kb = seg_lo[sg]; kb <= seg_hi[sg]; kb += DP_KTILE) {
            const int cnt = min(DP_KTILE, seg_hi[sg] - kb + 1);
            __syncthreads();
            if (t < cnt) stage[t] = dp_stage_k(a, table, i, j, kb + t);
            __syncthreads();
            if (stage[0].thr > block_max) {  // block-uniform
                done = true;
                break;
            }
#pragma unroll 1
            for (int kk = 0; kk < cnt; ++kk) {
                const DpKStage s = stage[kk];
                if (s.thr > my_max) break;
                dp_diag_apply(s, m, mload, best);
            }
        }
    }
    float* out = table + dp_row(n, i, j) * (long long)width;
#pragma unroll
    for (int r = 0; r < DP_DIAG_MPT; ++r) {
        if (m[r] < width) out[m[r]] = best[r];
    }
}

// Band [D, D + len): grid (ceil(W / BT), ceil((N + 1 - D) / DP_BAND)), block BT threads, one bucket
// m = bx * BT + t per thread, pairs (i0 + p, i0 + p + D + q) in registers. Writes the partial
// minimum (+inf where no bulk checkpoint is allowed) of every live pair with a bulk range.
extern "C" __global__ void __launch_bounds__(DP_BULK_THREADS)
dp_bulk(float* __restrict__ table, DP_PARAMS, int band_start, int band_len) {
    const DpArgs a = DP_ARGS;
    __shared__ DpBulkStage stage[DP_BULK_KTILE];
    __shared__ int tile_max;
    const int i0 = blockIdx.y * DP_BAND;
    const int t = threadIdx.x;
    const int block_min = blockIdx.x * DP_BULK_THREADS;
    const int m = block_min + t;
    const int mload = m < width ? m : width - 1;
    int block_max = block_min + DP_BULK_THREADS - 1;
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
        if (t == 0) tile_max = 0;
        __syncthreads();
        // Threshold rows (kk, p), one per thread; the row bases go to the threads without a row
        // (to all threads, after the rows, when every thread has one).
        const int rows = cnt * DP_BAND;
        for (int e = t; e < rows; e += DP_BULK_THREADS) {
            const int kk = e / DP_BAND;
            const int p = e - kk * DP_BAND;
            int lo, hi, stop;
            dp_bulk_thr_row(a, i0, band_start, band_len, kb + kk, p, &stage[kk], &lo, &hi, &stop);
            if (stop < DP_NEVER) atomicMin(&stage[kk].stop_thr, stop);
            if (lo < DP_NEVER) {
                atomicMin(&stage[kk].min_thr, lo);
                atomicMax(&stage[kk].max_thr, hi);
                atomicMax(&tile_max, hi);
            }
        }
        const int spare = rows < DP_BULK_THREADS ? DP_BULK_THREADS - rows : 0;
        for (int e = spare ? t - rows : t; e >= 0 && e < cnt * DP_BULK_PTRS; e += spare ? spare : DP_BULK_THREADS) {
            const int kk = e / DP_BULK_PTRS;
            const int x = e - kk * DP_BULK_PTRS;
            const float* row = dp_bulk_stage_ptr(a, table, i0, band_start, kb + kk, x);
            if (x < DP_BAND) stage[kk].left[x] = row;
            else stage[kk].right[x - DP_BAND] = row;
        }
        __syncthreads();
        if (stage[0].stop_thr > block_max) break;  // block-uniform
        if (tile_max <= block_min) {               // block-uniform: every threshold of the tile passes
#pragma unroll 1
            for (int kk = 0; kk < cnt; ++kk) dp_bulk_step<false>(stage[kk], mload, acc);
        } else {
#pragma unroll 1
            for (int kk = 0; kk < cnt; ++kk) {
                if (mload >= stage[kk].min_thr) dp_bulk_step<true>(stage[kk], mload, acc);
            }
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

// Grid (B): block b, DP_REC_THREADS threads, walks the policy at m_tops[b] into its own slices of the
// buffers: (i, j, m, k) quads in recover_policy's visiting order (see dp_common.cuh) at
// out + 4 b max_nodes, result[b] = count (or -1: infeasible state, -2: buffers too small); stack: 3
// ints per entry, max_stack entries from stack + 3 b max_stack. The walks are independent: one
// launch recovers every candidate a solve may need (gpusolve/dp/cuda.py, DeviceTable.prefetch).
extern "C" __global__ void __launch_bounds__(DP_REC_THREADS)
dp_recover(const float* __restrict__ table, DP_PARAMS, const int* __restrict__ m_tops, int* __restrict__ out,
           int max_nodes, int* __restrict__ stack, int max_stack, int* __restrict__ result) {
    const DpArgs a = DP_ARGS;
    const int b = blockIdx.x;
    const int m_top = m_tops[b];
    out += (long long)b * 4 * max_nodes;
    stack += (long long)b * 3 * max_stack;
    result += b;
    __shared__ float warp_value[DP_REC_THREADS / 32];
    __shared__ int warp_arg[DP_REC_THREADS / 32];
    __shared__ int state[4];  // i, j, m, status (1: visit, 0: done, < 0: error)
    const int t = threadIdx.x;
    const int lane = t & 31;
    const int warp = t >> 5;
    int count = 0, sp = 0;  // thread 0's
    if (t == 0) {
        state[0] = 0; state[1] = n; state[2] = m_top; state[3] = 1;
    }
    for (;;) {
        __syncthreads();
        const int i = state[0], j = state[1], mm = state[2];
        if (state[3] != 1) break;  // block-uniform
        float v, tape = DP_INF;
        int k, tape_allowed = 0;
        if (t == 0) tape = dp_rec_tape(a, table, i, j, mm, &tape_allowed);
        dp_rec_thread(a, table, i, j, mm, t, &v, &k);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float v2 = __shfl_down_sync(0xffffffffu, v, off);
            const int k2 = __shfl_down_sync(0xffffffffu, k, off);
            if (dp_rec_less(v2, k2, v, k)) {
                v = v2;
                k = k2;
            }
        }
        if (lane == 0) {
            warp_value[warp] = v;
            warp_arg[warp] = k;
        }
        __syncthreads();
        if (t == 0) {
            for (int w = 1; w < DP_REC_THREADS / 32; ++w) {
                if (dp_rec_less(warp_value[w], warp_arg[w], v, k)) {
                    v = warp_value[w];
                    k = warp_arg[w];
                }
            }
            const int choice = dp_rec_decide(i, j, tape_allowed, tape, v, k);
            int next[3] = {0, 0, 0};
            const int status = dp_rec_advance(a, i, j, mm, choice, out, &count, max_nodes, stack, &sp, max_stack, next);
            state[0] = next[0]; state[1] = next[1]; state[2] = next[2];
            state[3] = status;
            if (status != 1) result[0] = status == 0 ? count : status;
        }
    }
}
