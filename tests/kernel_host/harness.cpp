// Host emulation of the CUDA kernels of kernels/dp.cu, built from the same dp_common.cuh.
//
// Build (no GPU needed):  g++ -O2 -std=c++14 -ffp-contract=off -I kernels [-D DP_...=v ...]
// tests/kernel_host/harness.cpp (or nvcc -x c++ as host code); tests/test_kernel_host.py builds it
// with the -D values of gpusolve.dp.cuda.Geometry, the launch geometry the NVRTC source gets.
// Usage: harness DIR, where DIR holds what tests/test_kernel_host.py writes: meta.txt
// ("n width multi_tape bucket m_top"), plan.txt (one launch per line: "diag d band_start" or
// "bulk band_start band_len"), and the raw little-endian arrays <name>.bin of
// gpusolve.dp.cuda.device_arrays. Writes DIR/table.bin (float32, rows x W, sentinel row last),
// DIR/recover.bin (int32: count, then count quads i j m k) and DIR/stats.txt; with an optional
// DIR/states.txt ("i j m" per line), DIR/choices.bin (int32: the recovery's choice at each state). `harness --geometry`
// prints the geometry it was built with.
//
// Each launch is emulated block by block, in the kernels' order of phases: stage the k tile
// (the same device functions the kernels' staging threads call), then every thread's update with
// the same per-thread functions, taking the same block-uniform decisions (dp_bulk's unchecked
// tiles). Blocks of one launch write disjoint states and read only states of earlier launches (or,
// in dp_diag, the bulk value of their own state), so the sequential block order gives exactly what
// any device order gives. dp_recover's block is emulated state by state: every thread's share of
// the k, then the reduction and thread 0's decision.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <algorithm>

#include "dp_common.cuh"
#include "harness_common.h"

struct Stats {
    long long bulk_tiles_unchecked = 0;
    long long bulk_tiles_checked = 0;
    long long diag_blocks = 0;
    long long rec_states = 0;
};
static Stats stats;

static void emulate_diag(const DpArgs& a, float* table, int d, int band_start) {
    const int n = a.n, width = a.width;
    const int gx = (width + DP_DIAG_THREADS * DP_DIAG_MPT - 1) / (DP_DIAG_THREADS * DP_DIAG_MPT);
    const int gy = n + 1 - d;
    static float best[DP_DIAG_THREADS][DP_DIAG_MPT];
    static int mm[DP_DIAG_THREADS][DP_DIAG_MPT], mload[DP_DIAG_THREADS][DP_DIAG_MPT];
    DpKStage stage[DP_KTILE];
    for (int i = 0; i < gy; ++i) {
        const int j = i + d;
        for (int bx = 0; bx < gx; ++bx) {
            ++stats.diag_blocks;
            const int thr_tape = dp_thr_tape(a, i, j);
            for (int t = 0; t < DP_DIAG_THREADS; ++t)
                for (int r = 0; r < DP_DIAG_MPT; ++r) {
                    mm[t][r] = dp_diag_m(bx, t, r);
                    mload[t][r] = mm[t][r] < width ? mm[t][r] : width - 1;
                    best[t][r] = mm[t][r] < width ? dp_diag_init(a, table, i, j, mm[t][r], band_start, thr_tape) : DP_INF;
                }
            int block_max = dp_diag_m(bx, DP_DIAG_THREADS - 1, DP_DIAG_MPT - 1);
            block_max = block_max < width - 1 ? block_max : width - 1;
            int seg_lo[2], seg_hi[2];
            const int nseg = dp_edge_segments(i, j, band_start, seg_lo, seg_hi);
            bool done = false;
            for (int sg = 0; sg < nseg && !done; ++sg) {
                for (int kb = seg_lo[sg]; kb <= seg_hi[sg]; kb += DP_KTILE) {
                    const int cnt = std::min(DP_KTILE, seg_hi[sg] - kb + 1);
                    for (int t = 0; t < cnt; ++t) stage[t] = dp_stage_k(a, table, i, j, kb + t);
                    if (stage[0].thr > block_max) { done = true; break; }
                    for (int t = 0; t < DP_DIAG_THREADS; ++t) {
                        const int my_max = mload[t][DP_DIAG_MPT - 1];
                        for (int kk = 0; kk < cnt; ++kk) {
                            if (stage[kk].thr > my_max) break;
                            dp_diag_apply(stage[kk], mm[t], mload[t], best[t]);
                        }
                    }
                }
            }
            float* out = table + dp_row(n, i, j) * (dp_i64)width;
            for (int t = 0; t < DP_DIAG_THREADS; ++t)
                for (int r = 0; r < DP_DIAG_MPT; ++r)
                    if (mm[t][r] < width) out[mm[t][r]] = best[t][r];
        }
    }
}

static void emulate_bulk(const DpArgs& a, float* table, int band_start, int band_len) {
    const int n = a.n, width = a.width;
    const int gx = (width + DP_BULK_THREADS - 1) / DP_BULK_THREADS;
    const int gy = (n + 1 - band_start + DP_BAND - 1) / DP_BAND;
    static float acc[DP_BULK_THREADS][DP_BAND][DP_BAND];
    static DpBulkStage stage[DP_BULK_KTILE];
    for (int by = 0; by < gy; ++by) {
        const int i0 = by * DP_BAND;
        for (int bx = 0; bx < gx; ++bx) {
            const int block_min = bx * DP_BULK_THREADS;
            int block_max = block_min + DP_BULK_THREADS - 1;
            block_max = block_max < width - 1 ? block_max : width - 1;
            for (int t = 0; t < DP_BULK_THREADS; ++t)
                for (int p = 0; p < DP_BAND; ++p)
                    for (int q = 0; q < DP_BAND; ++q) acc[t][p][q] = DP_INF;
            const int k_end = dp_bulk_k_end(a, i0, band_start);
            for (int kb = i0 + 1; kb <= k_end; kb += DP_BULK_KTILE) {
                const int cnt = std::min(DP_BULK_KTILE, k_end - kb + 1);
                for (int t = 0; t < cnt; ++t) dp_bulk_stage_head(a, i0, kb + t, &stage[t]);
                int tile_max = 0;
                for (int e = 0; e < cnt * DP_BAND; ++e) {  // all threads' threshold rows
                    const int kk = e / DP_BAND;
                    const int p = e - kk * DP_BAND;
                    int lo, hi, stop;
                    dp_bulk_thr_row(a, i0, band_start, band_len, kb + kk, p, &stage[kk], &lo, &hi, &stop);
                    stage[kk].stop_thr = std::min(stage[kk].stop_thr, stop);
                    if (lo < DP_NEVER) {
                        stage[kk].min_thr = std::min(stage[kk].min_thr, lo);
                        stage[kk].max_thr = std::max(stage[kk].max_thr, hi);
                        tile_max = std::max(tile_max, hi);
                    }
                }
                for (int e = 0; e < cnt * DP_BULK_PTRS; ++e) {
                    const int kk = e / DP_BULK_PTRS;
                    const int x = e % DP_BULK_PTRS;
                    const float* row = dp_bulk_stage_ptr(a, table, i0, band_start, kb + kk, x);
                    if (x < DP_BAND) stage[kk].left[x] = row;
                    else stage[kk].right[x - DP_BAND] = row;
                }
                if (stage[0].stop_thr > block_max) break;
                const bool unchecked = tile_max <= block_min;
                ++(unchecked ? stats.bulk_tiles_unchecked : stats.bulk_tiles_checked);
                for (int t = 0; t < DP_BULK_THREADS; ++t) {
                    const int m = block_min + t;
                    const int mload = m < width ? m : width - 1;
                    for (int kk = 0; kk < cnt; ++kk) {
                        if (unchecked) dp_bulk_step<false>(stage[kk], mload, acc[t]);
                        else if (mload >= stage[kk].min_thr) dp_bulk_step<true>(stage[kk], mload, acc[t]);
                    }
                }
            }
            for (int t = 0; t < DP_BULK_THREADS; ++t) {
                const int m = block_min + t;
                if (m >= width) continue;
                for (int p = 0; p < DP_BAND; ++p)
                    for (int q = 0; q < DP_BAND; ++q) {
                        const int i = i0 + p;
                        int lo, hi;
                        if (dp_bulk_pair_live(a, i0, band_start, band_len, p, q) &&
                            dp_bulk_range(i, i + band_start + q, band_start, &lo, &hi))
                            table[dp_row(n, i, i + band_start + q) * (dp_i64)width + m] = acc[t][p][q];
                    }
            }
        }
    }
}

// dp_recover's block at one state: every thread's share, the reduction in the kernel's order
// (shuffle-down tree per warp, then thread 0 across warps), thread 0's decision.
static int emulate_choose(const DpArgs& a, const float* table, int i, int j, int m) {
    ++stats.rec_states;
    int tape_allowed;
    const float tape = dp_rec_tape(a, table, i, j, m, &tape_allowed);  // thread 0, before its share of the k
    float wv[DP_REC_THREADS / 32];
    int wk[DP_REC_THREADS / 32];
    for (int w = 0; w < DP_REC_THREADS / 32; ++w) {
        float v[32];
        int k[32];
        for (int lane = 0; lane < 32; ++lane) dp_rec_thread(a, table, i, j, m, 32 * w + lane, &v[lane], &k[lane]);
        for (int off = 16; off > 0; off >>= 1) {  // __shfl_down_sync: every lane reads the old values
            float v2[32];
            int k2[32];
            for (int lane = 0; lane < 32; ++lane) {
                const int src = lane + off < 32 ? lane + off : lane;
                v2[lane] = v[src];
                k2[lane] = k[src];
            }
            for (int lane = 0; lane < 32; ++lane)
                if (dp_rec_less(v2[lane], k2[lane], v[lane], k[lane])) { v[lane] = v2[lane]; k[lane] = k2[lane]; }
        }
        wv[w] = v[0];
        wk[w] = k[0];
    }
    float v = wv[0];
    int k = wk[0];
    for (int w = 1; w < DP_REC_THREADS / 32; ++w)
        if (dp_rec_less(wv[w], wk[w], v, k)) { v = wv[w]; k = wk[w]; }
    return dp_rec_decide(i, j, tape_allowed, tape, v, k);
}

// dp_recover: the walk from (0, N, m_top), thread 0's bookkeeping.
static int emulate_recover(const DpArgs& a, const float* table, int m_top, int* out, int max_nodes, int* stack,
                           int max_stack) {
    int count = 0, sp = 0;
    int i = 0, j = a.n, m = m_top;
    for (;;) {
        const int choice = emulate_choose(a, table, i, j, m);
        int next[3] = {0, 0, 0};
        const int status = dp_rec_advance(a, i, j, m, choice, out, &count, max_nodes, stack, &sp, max_stack, next);
        if (status != 1) return status == 0 ? count : status;
        i = next[0]; j = next[1]; m = next[2];
    }
}

int main(int argc, char** argv) {
    if (argc == 2 && std::strcmp(argv[1], "--geometry") == 0) {
        std::printf("DP_DIAG_THREADS=%d DP_DIAG_MPT=%d DP_KTILE=%d DP_BAND=%d DP_BULK_THREADS=%d DP_BULK_KTILE=%d "
                    "DP_REC_THREADS=%d\n", DP_DIAG_THREADS, DP_DIAG_MPT, DP_KTILE, DP_BAND, DP_BULK_THREADS,
                    DP_BULK_KTILE, DP_REC_THREADS);
        return 0;
    }
    if (argc != 2) { std::fprintf(stderr, "usage: %s DIR | --geometry\n", argv[0]); return 2; }
    const std::string dir = argv[1];
    int n, width, multi_tape, m_top;
    long long bucket;
    FILE* meta = std::fopen((dir + "/meta.txt").c_str(), "r");
    if (!meta || std::fscanf(meta, "%d %d %d %lld %d", &n, &width, &multi_tape, &bucket, &m_top) != 5) {
        std::fprintf(stderr, "bad meta.txt\n");
        return 2;
    }
    std::fclose(meta);
    const ChainArrays chain(dir);
    DpArgs a;
    a.n = n; a.width = width; a.multi_tape = multi_tape; a.bucket = bucket;
    chain.bind(a);

    const dp_i64 pairs = (dp_i64)n * (n + 1) / 2;
    // Poison: a state read before it is written shows up as a mismatch, not as a lucky zero.
    // The sentinel row after the last pair is +inf, as the device's (cuda.run fills it).
    std::vector<float> table((pairs + 1) * width, -12345.0f);
    std::fill(table.begin() + pairs * width, table.end(), DP_INF);

    FILE* plan = std::fopen((dir + "/plan.txt").c_str(), "r");
    if (!plan) { std::fprintf(stderr, "no plan.txt\n"); return 2; }
    char kind[16];
    int x, y;
    while (std::fscanf(plan, "%15s %d %d", kind, &x, &y) == 3) {
        if (std::strcmp(kind, "diag") == 0) emulate_diag(a, table.data(), x, y);
        else if (std::strcmp(kind, "bulk") == 0) emulate_bulk(a, table.data(), x, y);
        else { std::fprintf(stderr, "bad plan line %s\n", kind); return 2; }
    }
    std::fclose(plan);

    FILE* out = std::fopen((dir + "/table.bin").c_str(), "wb");
    std::fwrite(table.data(), sizeof(float), table.size(), out);
    std::fclose(out);

    const int nodes = 2 * n + 2;
    std::vector<int> quads(4 * nodes), stack(3 * nodes);
    int count = 0;
    if (m_top >= 0 && m_top < width) count = emulate_recover(a, table.data(), m_top, quads.data(), nodes, stack.data(), nodes);
    out = std::fopen((dir + "/recover.bin").c_str(), "wb");
    std::fwrite(&count, sizeof(int), 1, out);
    if (count > 0) std::fwrite(quads.data(), sizeof(int), 4 * count, out);
    std::fclose(out);

    // Optional states.txt ("i j m" per line): the recovery block's choice at each, to choices.bin.
    FILE* states = std::fopen((dir + "/states.txt").c_str(), "r");
    if (states) {
        std::vector<int> choices;
        int si, sj, sm;
        while (std::fscanf(states, "%d %d %d", &si, &sj, &sm) == 3) choices.push_back(emulate_choose(a, table.data(), si, sj, sm));
        std::fclose(states);
        out = std::fopen((dir + "/choices.bin").c_str(), "wb");
        if (!choices.empty()) std::fwrite(choices.data(), sizeof(int), choices.size(), out);
        std::fclose(out);
    }

    out = std::fopen((dir + "/stats.txt").c_str(), "w");
    std::fprintf(out, "bulk_tiles_unchecked %lld\nbulk_tiles_checked %lld\ndiag_blocks %lld\nrec_states %lld\n",
                 stats.bulk_tiles_unchecked, stats.bulk_tiles_checked, stats.diag_blocks, stats.rec_states);
    std::fclose(out);
    return 0;
}
