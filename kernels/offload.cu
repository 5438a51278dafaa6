// CUDA kernel of the combined recompute + offload DP C(i, j, m, sigma) (see offload_common.cuh for the
// arithmetic and the layout; gpusolve/offload/cuda.py injects the launch geometry as #defines, launches
// it and recovers policies on the host from on-demand reads of the planes).
//
// Launch sequence (gpusolve/offload/cuda.py, launch_plan): one offload_diag launch per diagonal
// d = j - i = 1..N in order; a launch fills both planes of every (i, m) of its diagonal and reads only
// rows of lower diagonals (written by earlier launches). No banded bulk variant (dp.cu's dp_bulk) exists
// for this DP: every checkpoint and swap is evaluated by offload_diag.
//
// Compiles with NVRTC (cupy.RawModule) and with `nvcc --ptx`; include path: this directory.
// dp_common.cuh's chain-kernel helpers that this kernel does not call would each draw NVRTC's
// "declared but never referenced" remark (#177); silenced for the shared headers only.
#pragma nv_diag_suppress 177
#include "offload_common.cuh"
#pragma nv_diag_default 177

// Diagonal d: grid (ceil(W / (OL_THREADS * OL_MPT)), N + 1 - d), block OL_THREADS. Block (bx, i) owns pair
// (i, i + d) and buckets ol_m(bx, t, r) of both planes. Per-k scalars and row bases are staged in shared
// memory OL_KTILE at a time; the block leaves as soon as the staged threshold exceeds its largest bucket
// (thresholds are nondecreasing in k), each thread as soon as it exceeds its own.
extern "C" __global__ void __launch_bounds__(OL_THREADS)
offload_diag(float* __restrict__ planes, const float* __restrict__ t_tape, const double* __restrict__ prefix,
             const int* __restrict__ act_b, const int* __restrict__ tape_b, const int* __restrict__ grad_q,
             const long long* __restrict__ grad_r, const int* __restrict__ peak_q,
             const long long* __restrict__ peak_r, const long long* __restrict__ tape_fwd,
             const long long* __restrict__ tape_need, const long long* __restrict__ grad_bytes,
             const float* __restrict__ w_off, const float* __restrict__ e_overlap,
             const float* __restrict__ e_full, const int* __restrict__ pre_b, int n, int width, int multi_tape,
             long long bucket, int d) {
    OlArgs a;
    a.c.n = n;
    a.c.width = width;
    a.c.multi_tape = multi_tape;
    a.c.bucket = bucket;
    a.c.t_tape = t_tape;
    a.c.prefix = prefix;
    a.c.act_b = act_b;
    a.c.tape_b = tape_b;
    a.c.grad_q = grad_q;
    a.c.grad_r = grad_r;
    a.c.peak_q = peak_q;
    a.c.peak_r = peak_r;
    a.c.tape_fwd = tape_fwd;
    a.c.tape_need = tape_need;
    a.c.grad_bytes = grad_bytes;
    a.w_off = w_off;
    a.e_overlap = e_overlap;
    a.e_full = e_full;
    a.pre_b = pre_b;
    __shared__ OlKStage stage[OL_KTILE];
    const int i = blockIdx.y;
    const int j = i + d;
    const int t = threadIdx.x;
    int m[OL_MPT], mload[OL_MPT];
    float best0[OL_MPT], best1[OL_MPT];
#pragma unroll
    for (int r = 0; r < OL_MPT; ++r) {
        m[r] = ol_m(blockIdx.x, t, r);
        mload[r] = m[r] < width ? m[r] : width - 1;
    }
    ol_init(a, planes, i, j, dp_thr_tape(a.c, i, j), m, best0, best1);
    int block_max = ol_m(blockIdx.x, OL_THREADS - 1, OL_MPT - 1);
    block_max = block_max < width - 1 ? block_max : width - 1;
    const int my_max = mload[OL_MPT - 1];
    const int act_i = act_b[i];
    const float e_full_i = e_full[i];
    for (int kb = i + 1; kb < j; kb += OL_KTILE) {
        const int cnt = min(OL_KTILE, j - kb);
        __syncthreads();
        if (t < cnt) stage[t] = ol_stage_k(a, planes, i, j, kb + t);
        __syncthreads();
        if (ol_block_stops(stage[0], block_max)) break;  // block-uniform
#pragma unroll 1
        for (int kk = 0; kk < cnt; ++kk) {
            const OlKStage s = stage[kk];
            if (ol_thread_stops(s, my_max)) break;
            ol_apply(s, act_i, e_full_i, width, m, mload, best0, best1);
        }
    }
    ol_store(a, planes, i, j, m, best0, best1);
}
