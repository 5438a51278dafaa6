// Host emulation of the CUDA join kernel of kernels/join.cu, built from the same join_common.cuh.
//
// Build (no GPU needed):  g++ -O2 -std=c++14 -ffp-contract=off -I kernels [-D JN_...=v ...]
// tests/kernel_host/join_harness.cpp; tests/test_join_kernel_host.py builds it with the -D values of
// gpusolve.join.cuda.JoinGeometry, the launch geometry the NVRTC source gets.
// Usage: join_harness DIR, where DIR holds what tests/test_join_kernel_host.py writes: meta.txt
// ("k width bucket turn_need t_turn_bits rows ctab_elements"), plan.txt (one launch per line:
// "plane_start count grid_x grid_y", from gpusolve.join.cuda.launch_plan), the raw little-endian
// arrays <name>.bin of gpusolve.join.cuda.device_arrays and ctab.bin (the branch chain tables,
// float32, as the chain backend leaves them on the device). Writes DIR/J.bin (float32, rows x W).
// `join_harness --geometry` prints the geometry it was built with.
//
// Each launch is emulated block by block, thread by thread, with the kernel's own per-thread
// function (jn_state_values). Blocks of one launch write disjoint rows and read only rows of earlier
// launches, so the sequential order gives exactly what any device order gives; the table starts
// poisoned, so a read of a row not yet written shows up as a mismatch.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "join_common.cuh"
#include "harness_common.h"

static long long blocks = 0;

static void emulate_plane(const JnArgs& a, float* J, const float* ctab, const long long* plane_rows,
                          long long start, int count, int grid_x, int grid_y) {
    if (grid_x != count) { std::fprintf(stderr, "grid_x %d != count %d\n", grid_x, count); std::exit(3); }
    for (int bx = 0; bx < grid_x; ++bx) {
        const long long row = plane_rows[start + bx];
        for (int by = 0; by < grid_y; ++by) {
            ++blocks;
            for (int t = 0; t < JN_THREADS; ++t) {
                int m[JN_MPT], mload[JN_MPT];
                float best[JN_MPT];
                for (int r = 0; r < JN_MPT; ++r) {
                    m[r] = jn_m(by, t, r);
                    mload[r] = m[r] < a.width ? m[r] : a.width - 1;
                }
                jn_state_values(a, J, ctab, row, mload, best);
                for (int r = 0; r < JN_MPT; ++r)
                    if (m[r] < a.width) J[row * (long long)a.width + m[r]] = best[r];
            }
        }
    }
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--geometry") == 0) {
        std::printf("JN_THREADS=%d JN_MPT=%d\n", JN_THREADS, JN_MPT);
        return 0;
    }
    if (argc != 2) { std::fprintf(stderr, "usage: %s DIR | --geometry\n", argv[0]); return 2; }
    const std::string dir = argv[1];
    int k, width, turn_need;
    unsigned int t_bits;
    long long bucket, rows, ctab_elements;
    FILE* meta = std::fopen((dir + "/meta.txt").c_str(), "r");
    if (!meta || std::fscanf(meta, "%d %d %lld %d %u %lld %lld", &k, &width, &bucket, &turn_need, &t_bits, &rows,
                             &ctab_elements) != 7) {
        std::fprintf(stderr, "bad meta.txt\n");
        return 2;
    }
    std::fclose(meta);
    float t_turn;
    std::memcpy(&t_turn, &t_bits, sizeof t_turn);
    std::vector<int> row_u = read_array<int>(dir, "row_u"), row_release = read_array<int>(dir, "row_release");
    std::vector<dp_i64> row_others = read_array<dp_i64>(dir, "row_others"), meta_b = read_array<dp_i64>(dir, "meta");
    std::vector<long long> plane_rows = read_array<long long>(dir, "plane_rows");
    std::vector<float> t_tape = read_array<float>(dir, "t_tape");
    std::vector<double> prefix = read_array<double>(dir, "prefix");
    std::vector<int> act_b = read_array<int>(dir, "act_b"), tape_b = read_array<int>(dir, "tape_b");
    std::vector<dp_i64> tape_fwd = read_array<dp_i64>(dir, "tape_fwd"), tape_need = read_array<dp_i64>(dir, "tape_need");
    std::vector<int> peak_q = read_array<int>(dir, "peak_q");
    std::vector<dp_i64> peak_r = read_array<dp_i64>(dir, "peak_r");
    std::vector<float> ctab = read_array<float>(dir, "ctab");
    if ((long long)ctab.size() - 1 != ctab_elements) { std::fprintf(stderr, "ctab.bin size\n"); return 2; }

    JnArgs a;
    a.k = k; a.width = width; a.bucket = bucket; a.turn_need = turn_need; a.t_turn = t_turn;
    a.row_u = row_u.data(); a.row_release = row_release.data(); a.row_others = row_others.data();
    a.meta = meta_b.data(); a.t_tape = t_tape.data(); a.prefix = prefix.data(); a.act_b = act_b.data();
    a.tape_b = tape_b.data(); a.tape_fwd = tape_fwd.data(); a.tape_need = tape_need.data();
    a.peak_q = peak_q.data(); a.peak_r = peak_r.data();

    std::vector<float> J(rows * width, -12345.0f);  // poison: a row read before it is written mismatches
    FILE* plan = std::fopen((dir + "/plan.txt").c_str(), "r");
    if (!plan) { std::fprintf(stderr, "no plan.txt\n"); return 2; }
    long long start;
    int count, gx, gy;
    while (std::fscanf(plan, "%lld %d %d %d", &start, &count, &gx, &gy) == 4)
        emulate_plane(a, J.data(), ctab.data(), plane_rows.data(), start, count, gx, gy);
    std::fclose(plan);

    FILE* out = std::fopen((dir + "/J.bin").c_str(), "wb");
    std::fwrite(J.data(), sizeof(float), J.size(), out);
    std::fclose(out);
    out = std::fopen((dir + "/stats.txt").c_str(), "w");
    std::fprintf(out, "blocks %lld\n", blocks);
    std::fclose(out);
    return 0;
}
