// Times q4_0x8_rows_dot<4>, the inner loop of specchat's AVX2 Q4_0 four-row GEMM
// (patches/llama.cpp/0001 and 0005), on random weights and activations: the work of one
// verify pass's matrix products without the rest of llama.cpp (benchmarks/rows_dot.py builds
// and runs it; KERNEL names the file that defines the loop and its helpers).
//
// Prints one line: ns per row-block (one row of activations against one repacked block of
// eight columns: 256 multiply-adds) and a checksum of the results, equal for kernels that
// compute the same thing on the same layout.
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

typedef uint16_t ggml_half;
struct block_q4_0x8 { ggml_half d[8]; uint8_t qs[128]; };
struct block_q8_0x4 { ggml_half d[4]; int8_t qs[128]; };
#define GGML_F32Cx8_LOAD(x) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x)))

#include KERNEL

int main(int argc, char ** argv) {
    const int groups = argc > 1 ? atoi(argv[1]) : 64;
    const int passes = argc > 2 ? atoi(argv[2]) : 500;
    const int nb = argc > 3 ? atoi(argv[3]) : 48;  // blocks a row: 1536 columns, the 1.5B target's width
    std::mt19937 rng(1);
    std::vector<block_q4_0x8> w((size_t) groups * nb);
    for (auto & b : w) {
        for (auto & d : b.d) d = 0x3c00;  // 1.0 in fp16
        for (auto & q : b.qs) q = (uint8_t) rng();
    }
    std::vector<block_q8_0x4> a(nb);
    for (auto & b : a) {
        for (auto & d : b.d) d = 0x3c00;
        for (auto & q : b.qs) q = (int8_t) ((int) (rng() % 255) - 127);
    }
    std::vector<int32_t> offsets(4 * nb);
    std::vector<float> scales(4 * nb, 1.0f);
    for (auto & o : offsets) o = (int32_t) (rng() % 1000);
#ifdef PREBROADCAST
    // each row's eights of each block as four 32-byte vectors, broadcast once here
    std::vector<int8_t> pre(4 * (size_t) nb * 128 + 32);
    int8_t * p = (int8_t *) (((uintptr_t) pre.data() + 31) & ~(uintptr_t) 31);
    for (int r = 0; r < 4; r++)
        for (int b = 0; b < nb; b++)
            for (int c = 0; c < 4; c++)
                for (int l = 0; l < 32; l++) p[((size_t) r * nb + b) * 128 + c * 32 + l] = a[b].qs[32 * c + 8 * r + l % 8];
    const int8_t * const qs[4] = { p, p + nb * 128, p + 2 * nb * 128, p + 3 * nb * 128 };
#else
    const int8_t * const qs[4] = { a[0].qs, a[0].qs + 8, a[0].qs + 16, a[0].qs + 24 };
#endif
    double best = 1e30, checksum = 0;
    for (int rep = 0; rep < 5; rep++) {
        double sum = 0;
        const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : sum)
        for (int pass = 0; pass < passes; pass++) {
#pragma omp for schedule(static) nowait
            for (int x = 0; x < groups; x++) {
                __m256 acc[4];
                for (auto & v : acc) v = _mm256_setzero_ps();
                q4_0x8_rows_dot<4>(w.data() + (size_t) x * nb, nb, qs, sizeof(block_q8_0x4), 32, offsets.data(),
                                   scales.data(), 1, 4, acc);
                float out[8];
                for (auto & v : acc) {
                    _mm256_storeu_ps(out, v);
                    for (float f : out) sum += f;
                }
            }
        }
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = dt < best ? dt : best;
        checksum = sum;
    }
    printf("%.4f %.6e\n", best / ((double) passes * groups * nb * 4) * 1e9, checksum);
    return 0;
}
