// Half-precision matrix product on tensor cores with WMMA: C (f32) = A (f16) * B (f16),
// row-major, built with nvcc (it includes the CUDA runtime and <mma.h>, which NVRTC's
// in-memory headers do not provide).
//
// Entry points
//
//   wmma_gemm_f16(const __half* A, const __half* B, float* C, int M, int N, int K)
//     tensor-core kernel: each warp computes one 16x16 tile of C with 16x16x16 WMMA
//     fragments, stepping through K; the block holds 4x2 warps (a 64x32 tile of C).
//     M, N, K must be multiples of 16 (the recipe's sizes are).
//     launch: grid  = (ceil(N / 32), ceil(M / 64), 1)
//             block = (256, 1, 1)   [8 warps]
//             dynamic shared memory = 0 bytes
//
//   wmma_gemm_ref(const __half* A, const __half* B, float* C, int M, int N, int K)
//     reference: one thread per element of C, f32 accumulation of the same f16 products.
//     launch: grid  = (ceil(N / 16), ceil(M / 16), 1)
//             block = (16, 16, 1)
//
// Check: both accumulate exact f16 products in f32, in different orders; K = 512 sums of
// products of N(0,1) values differ by a few ulps of f32: atol 1e-2, rtol 1e-3.

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

namespace {
constexpr int kTile = 16;
constexpr int kWarpsM = 4;  // warps along M in a block
constexpr int kWarpsN = 2;  // warps along N in a block
}

extern "C" __global__ void __launch_bounds__(256)
wmma_gemm_f16(const __half* __restrict__ A, const __half* __restrict__ B,
              float* __restrict__ C, int M, int N, int K) {
    const int warp = threadIdx.x / warpSize;
    const int tile_m = (blockIdx.y * kWarpsM + warp / kWarpsN) * kTile;
    const int tile_n = (blockIdx.x * kWarpsN + warp % kWarpsN) * kTile;
    if (tile_m >= M || tile_n >= N) {
        return;  // the whole warp leaves together: WMMA needs every lane
    }
    wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += kTile) {
        wmma::load_matrix_sync(a, A + (size_t)tile_m * K + k, K);
        wmma::load_matrix_sync(b, B + (size_t)k * N + tile_n, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + (size_t)tile_m * N + tile_n, acc, N, wmma::mem_row_major);
}

extern "C" __global__ void
wmma_gemm_ref(const __half* __restrict__ A, const __half* __restrict__ B,
              float* __restrict__ C, int M, int N, int K) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) {
        return;
    }
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
        sum += __half2float(A[(size_t)row * K + k]) * __half2float(B[(size_t)k * N + col]);
    }
    C[(size_t)row * N + col] = sum;
}
