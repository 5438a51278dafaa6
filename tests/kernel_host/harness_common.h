// What the host harnesses of tests/kernel_host/ share: reading the raw arrays the tests write, and
// the chain instance (kernels/dp_common.cuh's DpArgs) from the arrays of gpusolve.dp.cuda.device_arrays.
// Included after the kernel header the harness emulates (which includes dp_common.cuh).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dp_common.cuh"

// DIR/<name>.bin, raw little-endian T; exits 2 when it cannot be read.
template <typename T>
static std::vector<T> read_array(const std::string& dir, const char* name) {
    std::string path = dir + "/" + name + ".bin";
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) { std::fprintf(stderr, "cannot open %s\n", path.c_str()); std::exit(2); }
    std::fseek(f, 0, SEEK_END);
    long size = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    std::vector<T> v(size / sizeof(T) + 1);  // + 1: never an empty vector (empty branches' arrays)
    if (size && std::fread(v.data(), 1, size, f) != (size_t)size) {
        std::fprintf(stderr, "short read %s\n", path.c_str());
        std::exit(2);
    }
    std::fclose(f);
    return v;
}

// The chain arrays of gpusolve.dp.cuda.device_arrays (ARRAY_ORDER), read from DIR; bind() points a
// DpArgs at them (the scalars n, width, multi_tape, bucket are set by the harness).
struct ChainArrays {
    std::vector<float> t_tape;
    std::vector<double> prefix;
    std::vector<int> act_b, tape_b, grad_q, peak_q;
    std::vector<dp_i64> grad_r, peak_r, tape_fwd, tape_need, grad_bytes;

    explicit ChainArrays(const std::string& dir)
        : t_tape(read_array<float>(dir, "t_tape")), prefix(read_array<double>(dir, "prefix")),
          act_b(read_array<int>(dir, "act_b")), tape_b(read_array<int>(dir, "tape_b")),
          grad_q(read_array<int>(dir, "grad_q")), peak_q(read_array<int>(dir, "peak_q")),
          grad_r(read_array<dp_i64>(dir, "grad_r")), peak_r(read_array<dp_i64>(dir, "peak_r")),
          tape_fwd(read_array<dp_i64>(dir, "tape_fwd")), tape_need(read_array<dp_i64>(dir, "tape_need")),
          grad_bytes(read_array<dp_i64>(dir, "grad_bytes")) {}

    void bind(DpArgs& a) const {
        a.t_tape = t_tape.data(); a.prefix = prefix.data(); a.act_b = act_b.data(); a.tape_b = tape_b.data();
        a.grad_q = grad_q.data(); a.grad_r = grad_r.data(); a.peak_q = peak_q.data(); a.peak_r = peak_r.data();
        a.tape_fwd = tape_fwd.data(); a.tape_need = tape_need.data(); a.grad_bytes = grad_bytes.data();
    }
};
