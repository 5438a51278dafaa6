// CUDA kernel of the heterogeneous join DP (see join_common.cuh for the arithmetic and the layout;
// gpusolve/join/cuda.py injects the launch geometry as #defines and launches it).
//
// Launch sequence (gpusolve/join/cuda.py, launch_plan): one join_plane launch per hyperplane
// |s| = d, d = sum(l) down to 0 (Note [Hyperplanes] in gpusolve/join/dp.py): the states of one
// hyperplane are independent and read only states of earlier launches and the branch chain tables,
// which the chain kernels (dp.cu) filled on the device before the first launch.
//
// Compiles with NVRTC (cupy.RawModule) and with `nvcc --ptx`; include path: this directory.
// dp_common.cuh's chain-kernel helpers that the join kernel does not call would each draw NVRTC's
// "declared but never referenced" remark (#177); silenced for the shared headers only.
#pragma nv_diag_suppress 177
#include "join_common.cuh"
#pragma nv_diag_default 177

// Hyperplane launch: grid (count, ceil(W / (JN_THREADS * JN_MPT))), block JN_THREADS. Block
// (x, y) owns state plane_rows[plane_start + x] and buckets jn_m(y, t, r); each thread runs the
// candidate loop of jn_state_values for its JN_MPT buckets in registers and writes their minimum.
extern "C" __global__ void __launch_bounds__(JN_THREADS)
join_plane(float* __restrict__ J, const float* __restrict__ ctab, const long long* __restrict__ plane_rows,
           long long plane_start, const int* __restrict__ row_u, const int* __restrict__ row_release,
           const long long* __restrict__ row_others, const long long* __restrict__ meta,
           const float* __restrict__ t_tape, const double* __restrict__ prefix, const int* __restrict__ act_b,
           const int* __restrict__ tape_b, const long long* __restrict__ tape_fwd,
           const long long* __restrict__ tape_need, const int* __restrict__ peak_q,
           const long long* __restrict__ peak_r, int k, int width, long long bucket, int turn_need, float t_turn) {
    JnArgs a;
    a.k = k;
    a.width = width;
    a.bucket = bucket;
    a.turn_need = turn_need;
    a.t_turn = t_turn;
    a.row_u = row_u;
    a.row_release = row_release;
    a.row_others = row_others;
    a.meta = meta;
    a.t_tape = t_tape;
    a.prefix = prefix;
    a.act_b = act_b;
    a.tape_b = tape_b;
    a.tape_fwd = tape_fwd;
    a.tape_need = tape_need;
    a.peak_q = peak_q;
    a.peak_r = peak_r;
    const long long row = plane_rows[plane_start + blockIdx.x];
    int m[JN_MPT], mload[JN_MPT];
    float best[JN_MPT];
#pragma unroll
    for (int r = 0; r < JN_MPT; ++r) {
        m[r] = jn_m(blockIdx.y, threadIdx.x, r);
        mload[r] = m[r] < width ? m[r] : width - 1;
    }
    jn_state_values(a, J, ctab, row, mload, best);
    float* out = J + row * (long long)width;
#pragma unroll
    for (int r = 0; r < JN_MPT; ++r) {
        if (m[r] < width) out[m[r]] = best[r];
    }
}
