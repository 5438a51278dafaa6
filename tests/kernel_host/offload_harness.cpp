// Host emulation of the CUDA kernel of kernels/offload.cu, built from the same offload_common.cuh.
//
// Build (no GPU needed):  g++ -O2 -std=c++14 -ffp-contract=off -I kernels [-D OL_...=v ...]
// tests/kernel_host/offload_harness.cpp; tests/test_offload_kernel_host.py builds it with the -D values
// of gpusolve.offload.cuda.OffloadGeometry, the launch geometry the NVRTC source gets.
// Usage: offload_harness DIR, where DIR holds what tests/test_offload_kernel_host.py writes: meta.txt
// ("n width multi_tape bucket"), plan.txt (one launch per line: "d grid_x grid_y", from
// gpusolve.offload.cuda.launch_plan) and the raw little-endian arrays <name>.bin of
// gpusolve.offload.cuda.device_arrays. Writes DIR/planes.bin (float32, 2 x pairs x W: plane 0 then
// plane 1) and DIR/stats.txt. `offload_harness --geometry` prints the geometry it was built with.
//
// Each launch is emulated block by block in the kernel's order of phases: stage the k tile (the same
// function the kernel's staging threads call), the block-uniform exit test, then every thread's update
// with the kernel's per-thread functions (ol_stage_k, ol_init, ol_apply, ol_store, the exit
// tests ol_block_stops / ol_thread_stops); only the loop structure below mirrors offload_diag's body. Blocks of one launch write disjoint states and read only
// rows of earlier launches, so the sequential block order gives exactly what any device order gives;
// the planes start poisoned, so a read of a state not yet written shows up as a mismatch.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "offload_common.cuh"
#include "harness_common.h"

static long long blocks = 0, block_exits = 0, tiles = 0, later_tiles = 0, thread_exits = 0;

static void emulate_diag(const OlArgs& a, float* planes, int d, int gx, int gy) {
    const int n = a.c.n, width = a.c.width;
    const int want_gx = (width + OL_THREADS * OL_MPT - 1) / (OL_THREADS * OL_MPT);
    if (gx != want_gx || gy != n + 1 - d) {
        std::fprintf(stderr, "grid (%d, %d) of diagonal %d is not the kernel's (%d, %d)\n", gx, gy, d, want_gx,
                     n + 1 - d);
        std::exit(3);
    }
    static int m[OL_THREADS][OL_MPT], mload[OL_THREADS][OL_MPT];
    static float best0[OL_THREADS][OL_MPT], best1[OL_THREADS][OL_MPT];
    OlKStage stage[OL_KTILE];
    for (int i = 0; i < gy; ++i) {
        const int j = i + d;
        for (int bx = 0; bx < gx; ++bx) {
            ++blocks;
            const int thr_tape = dp_thr_tape(a.c, i, j);
            for (int t = 0; t < OL_THREADS; ++t) {
                for (int r = 0; r < OL_MPT; ++r) {
                    m[t][r] = ol_m(bx, t, r);
                    mload[t][r] = m[t][r] < width ? m[t][r] : width - 1;
                }
                ol_init(a, planes, i, j, thr_tape, m[t], best0[t], best1[t]);
            }
            int block_max = ol_m(bx, OL_THREADS - 1, OL_MPT - 1);
            block_max = block_max < width - 1 ? block_max : width - 1;
            const int act_i = a.c.act_b[i];
            const float e_full_i = a.e_full[i];
            for (int kb = i + 1; kb < j; kb += OL_KTILE) {
                const int cnt = std::min(OL_KTILE, j - kb);
                for (int t = 0; t < cnt; ++t) stage[t] = ol_stage_k(a, planes, i, j, kb + t);
                ++tiles;
                if (ol_block_stops(stage[0], block_max)) { ++block_exits; break; }
                if (kb > i + 1) ++later_tiles;  // a second (third, ...) tile evaluated
                for (int t = 0; t < OL_THREADS; ++t) {
                    const int my_max = mload[t][OL_MPT - 1];
                    for (int kk = 0; kk < cnt; ++kk) {
                        if (ol_thread_stops(stage[kk], my_max)) { ++thread_exits; break; }
                        ol_apply(stage[kk], act_i, e_full_i, width, m[t], mload[t], best0[t], best1[t]);
                    }
                }
            }
            for (int t = 0; t < OL_THREADS; ++t) ol_store(a, planes, i, j, m[t], best0[t], best1[t]);
        }
    }
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--geometry") == 0) {
        std::printf("OL_THREADS=%d OL_MPT=%d OL_KTILE=%d\n", OL_THREADS, OL_MPT, OL_KTILE);
        return 0;
    }
    if (argc != 2) { std::fprintf(stderr, "usage: %s DIR | --geometry\n", argv[0]); return 2; }
    const std::string dir = argv[1];
    int n, width, multi_tape;
    long long bucket;
    FILE* meta = std::fopen((dir + "/meta.txt").c_str(), "r");
    if (!meta || std::fscanf(meta, "%d %d %d %lld", &n, &width, &multi_tape, &bucket) != 4) {
        std::fprintf(stderr, "bad meta.txt\n");
        return 2;
    }
    std::fclose(meta);
    const ChainArrays chain(dir);
    std::vector<float> w_off = read_array<float>(dir, "w_off"), e_overlap = read_array<float>(dir, "e_overlap");
    std::vector<float> e_full = read_array<float>(dir, "e_full");
    std::vector<int> pre_b = read_array<int>(dir, "pre_b");

    OlArgs a;
    a.c.n = n; a.c.width = width; a.c.multi_tape = multi_tape; a.c.bucket = bucket;
    chain.bind(a.c);
    a.w_off = w_off.data(); a.e_overlap = e_overlap.data(); a.e_full = e_full.data(); a.pre_b = pre_b.data();

    const long long pairs = (long long)n * (n + 1) / 2;
    std::vector<float> planes(2 * pairs * width, -12345.0f);  // poison: a state read before it is written
    FILE* plan = std::fopen((dir + "/plan.txt").c_str(), "r");
    if (!plan) { std::fprintf(stderr, "no plan.txt\n"); return 2; }
    int d, gx, gy, expect = 1;
    while (std::fscanf(plan, "%d %d %d", &d, &gx, &gy) == 3) {
        if (d != expect++) { std::fprintf(stderr, "launch of diagonal %d out of order\n", d); return 3; }
        emulate_diag(a, planes.data(), d, gx, gy);
    }
    std::fclose(plan);

    FILE* out = std::fopen((dir + "/planes.bin").c_str(), "wb");
    std::fwrite(planes.data(), sizeof(float), planes.size(), out);
    std::fclose(out);
    out = std::fopen((dir + "/stats.txt").c_str(), "w");
    std::fprintf(out, "blocks %lld\ntiles %lld\nlater_tiles %lld\nblock_exits %lld\nthread_exits %lld\n", blocks,
                 tiles, later_tiles, block_exits, thread_exits);
    std::fclose(out);
    return 0;
}
