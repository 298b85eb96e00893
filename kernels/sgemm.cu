// Single-precision matrix product C = A * B (fp32, row-major).
// A is M x K (lda = K), B is K x N (ldb = N), C is M x N (ldc = N). C is overwritten.
//
// Entry points
//
//   sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K)
//     fast kernel: 128 x 128 block tile, K staged through shared memory 16 at a time, each of the
//     256 threads accumulates an 8 x 8 register block in fp32 (FMA, k in ascending order).
//     Any M, N, K >= 1 (edges are zero-padded on load and masked on store).
//     launch: grid  = (ceil(N / 128), ceil(M / 128), 1)
//             block = (256, 1, 1)              [exactly 256]
//             dynamic shared memory = 0 bytes  (16896 bytes of static shared memory)
//
//   sgemm_ref(const float* A, const float* B, float* C, int M, int N, int K)
//     reference: one thread per C element, plain loop over k in ascending order.
//     launch: grid  = (ceil(N / 16), ceil(M / 16), 1)
//             block = (16, 16, 1)
//             dynamic shared memory = 0 bytes
//
// Check: C from sgemm_tiled against C from sgemm_ref, inputs uniform in [-1, 1), K <= 4096.
//   tolerance: atol = 1e-4, rtol = 1e-4. (Both accumulate the same products in the same order
//   with fused multiply-adds, so in practice they agree bitwise; the tolerance allows for a
//   different contraction choice by a future compiler.)

#define SG_BM 128  // rows of C per block
#define SG_BN 128  // columns of C per block
#define SG_BK 16   // k-slice staged per iteration
#define SG_PAD 4   // shared row padding (floats); keeps rows 16-byte aligned
#define SG_THREADS 256

extern "C" __global__ void __launch_bounds__(SG_THREADS)
sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
            int M, int N, int K) {
    // As is stored transposed (As[k][m]) so that the compute loop reads it with float4.
    __shared__ alignas(16) float As[SG_BK][SG_BM + SG_PAD];
    __shared__ alignas(16) float Bs[SG_BK][SG_BN + SG_PAD];

    const int tid = threadIdx.x;
    const int tx = tid & 15;   // column group
    const int ty = tid >> 4;   // row group
    const int row0 = blockIdx.y * SG_BM;
    const int col0 = blockIdx.x * SG_BN;

    // Thread (ty, tx) owns rows   {ty*4 + i, 64 + ty*4 + i} (i < 4) of the block tile and
    //                     columns {tx*4 + j, 64 + tx*4 + j} (j < 4).
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    // Load mapping. A tile (128 x 16): thread loads k = tid % 16, rows tid / 16 + 16 * i.
    //               B tile (16 x 128): thread loads column tid % 128, k = tid / 128 + 2 * i.
    const int a_k = tid & 15;
    const int a_r = tid >> 4;
    const int b_c = tid & 127;
    const int b_k = tid >> 7;

    for (int k0 = 0; k0 < K; k0 += SG_BK) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = a_r + 16 * i;
            const int gr = row0 + r;
            const int gk = k0 + a_k;
            As[a_k][r] = (gr < M && gk < K) ? A[(long long)gr * K + gk] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int kk = b_k + 2 * i;
            const int gk = k0 + kk;
            const int gc = col0 + b_c;
            Bs[kk][b_c] = (gk < K && gc < N) ? B[(long long)gk * N + gc] : 0.0f;
        }
        __syncthreads();

#pragma unroll
        for (int k = 0; k < SG_BK; ++k) {
            const float4 a_lo = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
            const float4 a_hi = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
            const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
            const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
            const float a[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
            const float b[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // the tiles are overwritten by the next iteration
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = row0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int c = col0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + (j - 4));
            if (c < N) C[(long long)r * N + c] = acc[i][j];
        }
    }
}

extern "C" __global__ void sgemm_ref(const float* A, const float* B, float* C, int M, int N, int K) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= M || c >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(long long)r * K + k] * B[(long long)k * N + c];
    C[(long long)r * N + c] = acc;
}
