// FlashAttention-style forward pass, fp16 in / fp16 out, fp32 softmax and accumulation.
//
//   O[b][i][:] = sum_j softmax_j(scale * Q[b][i][:] . K[b][j][:]) * V[b][j][:]
//
// Q, K, V, O: [batch_heads, seq_len, 64] contiguous fp16 (head dim fixed at 64), passed as raw
// fp16 bit patterns (unsigned short). scale = 1 / sqrt(64) = 0.125. Non-causal, no masking.
//
// Entry points
//
//   flash_attn_fwd(const unsigned short* Q, const unsigned short* K, const unsigned short* V,
//                  unsigned short* O, int batch_heads, int seq_len)
//     fast kernel: each block owns 64 query rows of one (batch, head); its 4 warps own 16 rows
//     each. K/V tiles of 64 keys are staged through shared memory; S = Q K^T and O += P V run
//     on the tensor cores (mma.sync m16n8k16, fp16 inputs, fp32 accumulators); the softmax is
//     online (running row max and row sum in fp32, exp2 with the scale folded in). Designed for
//     seq_len a multiple of 64 (128 .. 4096 and beyond); other seq_len >= 1 are also handled
//     (partial tiles are zero-filled and masked). Q, K, V, O must be 16-byte aligned.
//     launch: grid  = (ceil(seq_len / 64), batch_heads, 1)
//             block = (128, 1, 1)              [exactly 128]
//             dynamic shared memory = 0 bytes  (18432 bytes of static shared memory)
//
//   flash_attn_ref(const unsigned short* Q, const unsigned short* K, const unsigned short* V,
//                  unsigned short* O, int batch_heads, int seq_len)
//     reference: one thread per (batch_head, query row); two passes over all keys in fp32
//     (pass 1: row max of the scaled scores; pass 2: sum of exp and the exp-weighted sum of V),
//     then O = acc / sum rounded to fp16.
//     launch: grid  = (ceil(batch_heads * seq_len / 128), 1, 1)
//             block = (128, 1, 1)
//             dynamic shared memory = 0 bytes
//
// Check: O from flash_attn_fwd against O from flash_attn_ref (both fp16, compared as fp32),
// Q, K, V uniform in [-1, 1) or standard normal, seq_len 128 .. 4096.
//   tolerance: atol = 2e-3, rtol = 1e-2. (The fast kernel rounds the probabilities to fp16
//   before P V, as FlashAttention does; both round O to fp16.)
#include "common.cuh"

#define FA_D 64        // head dimension
#define FA_BM 64       // query rows per block (16 per warp)
#define FA_BN 64       // keys per K/V tile
#define FA_LDS 72      // shared row stride in halves: 64 + 8 padding (144 bytes, 16-aligned)
#define FA_THREADS 128

// D += A * B for one m16n8k16 tile: A 16x16 fp16 (row), B 16x8 fp16 (col), D 16x8 fp32.
__device__ __forceinline__ void mma_m16n8k16(float* d, const unsigned* a, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(FA_THREADS)
flash_attn_fwd(const unsigned short* __restrict__ Q, const unsigned short* __restrict__ K,
               const unsigned short* __restrict__ V, unsigned short* __restrict__ O,
               int batch_heads, int seq_len) {
    __shared__ alignas(16) unsigned short Ks[FA_BN * FA_LDS];  // Ks[key][d]
    __shared__ alignas(16) unsigned short Vs[FA_BN * FA_LDS];  // Vs[key][d]

    const int bh = blockIdx.y;
    const int q0 = blockIdx.x * FA_BM;
    if (bh >= batch_heads || q0 >= seq_len) return;  // uniform across the block

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;  // mma "groupID": fragment row (and row + 8)
    const int t = lane & 3;   // mma "threadID_in_group": fragment column pair

    const long long base = (long long)bh * seq_len * FA_D;
    const unsigned short* Qb = Q + base;
    const unsigned short* Kb = K + base;
    const unsigned short* Vb = V + base;
    unsigned short* Ob = O + base;

    // This thread's two query rows (fragment rows g and g + 8 of the warp's 16).
    const int r0 = q0 + warp * 16 + g;
    const int r1 = r0 + 8;

    // Q as mma A fragments, one per 16-wide slice of the head dim; rows past seq_len are zero.
    unsigned qa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        const int c = kk * 16 + t * 2;
        qa[kk][0] = r0 < seq_len ? *reinterpret_cast<const unsigned*>(Qb + (long long)r0 * FA_D + c) : 0u;
        qa[kk][1] = r1 < seq_len ? *reinterpret_cast<const unsigned*>(Qb + (long long)r1 * FA_D + c) : 0u;
        qa[kk][2] = r0 < seq_len ? *reinterpret_cast<const unsigned*>(Qb + (long long)r0 * FA_D + c + 8) : 0u;
        qa[kk][3] = r1 < seq_len ? *reinterpret_cast<const unsigned*>(Qb + (long long)r1 * FA_D + c + 8) : 0u;
    }

    // O accumulators: 8 tiles of 8 head-dim columns; [0],[1] -> row r0, [2],[3] -> row r1,
    // columns dn * 8 + t * 2 + {0, 1}.
    float o[8][4];
#pragma unroll
    for (int dn = 0; dn < 8; ++dn) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    float m0 = neg_inf(), m1 = neg_inf();  // running max of raw scores Q.K (rows r0, r1)
    float l0 = 0.0f, l1 = 0.0f;            // this thread's share of the running row sums

    const float sl2 = 0.125f * 1.4426950408889634f;  // scale * log2(e)

    for (int k0 = 0; k0 < seq_len; k0 += FA_BN) {
        __syncthreads();  // every warp is done reading the previous tile
        // Stage K and V tiles: 64 rows x 128 bytes each = 512 16-byte chunks, 4 per thread.
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int idx = tid + i * FA_THREADS;
            const int row = idx >> 3;
            const int ch = idx & 7;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u);
            uint4 vv = make_uint4(0u, 0u, 0u, 0u);
            if (k0 + row < seq_len) {
                const long long off = (long long)(k0 + row) * FA_D + ch * 8;
                kv = *reinterpret_cast<const uint4*>(Kb + off);
                vv = *reinterpret_cast<const uint4*>(Vb + off);
            }
            *reinterpret_cast<uint4*>(Ks + row * FA_LDS + ch * 8) = kv;
            *reinterpret_cast<uint4*>(Vs + row * FA_LDS + ch * 8) = vv;
        }
        __syncthreads();

        // S = Q K^T for this warp's 16 rows x 64 keys: 8 tiles of 8 keys.
        // s[n][0..1] -> row r0, keys k0 + n*8 + t*2 + {0,1}; s[n][2..3] -> row r1, same keys.
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const unsigned short* krow = Ks + (n * 8 + g) * FA_LDS + t * 2;
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                const unsigned b0 = *reinterpret_cast<const unsigned*>(krow + kk * 16);
                const unsigned b1 = *reinterpret_cast<const unsigned*>(krow + kk * 16 + 8);
                mma_m16n8k16(s[n], qa[kk], b0, b1);
            }
        }

        // Mask keys past seq_len (only in a partial last tile).
        if (k0 + FA_BN > seq_len) {
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                const int key = k0 + n * 8 + t * 2;
                if (key >= seq_len) s[n][0] = s[n][2] = neg_inf();
                if (key + 1 >= seq_len) s[n][1] = s[n][3] = neg_inf();
            }
        }

        // New row max over this tile: the 4 threads of a group together hold a row's 64 keys.
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
            mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // Every tile holds at least one valid key, so mx0/mx1 are finite here; on the first
        // tile m0/m1 are -inf and the rescale factors are exp2(-inf) = 0.
        const float alpha0 = exp2f((m0 - mx0) * sl2);
        const float alpha1 = exp2f((m1 - mx1) * sl2);
        m0 = mx0;
        m1 = mx1;
        const float ms0 = mx0 * sl2;
        const float ms1 = mx1 * sl2;

        // P = exp(scale * (S - max)), packed straight into mma A fragments: keys 16j..16j+15
        // are S tiles 2j (fragment regs 0, 1) and 2j+1 (regs 2, 3).
        unsigned pa[4][4];
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            const float p0 = exp2f(fmaf(s[n][0], sl2, -ms0));
            const float p1 = exp2f(fmaf(s[n][1], sl2, -ms0));
            const float p2 = exp2f(fmaf(s[n][2], sl2, -ms1));
            const float p3 = exp2f(fmaf(s[n][3], sl2, -ms1));
            rs0 += p0 + p1;
            rs1 += p2 + p3;
            pa[n >> 1][(n & 1) * 2 + 0] = pack_f2h2(p0, p1);
            pa[n >> 1][(n & 1) * 2 + 1] = pack_f2h2(p2, p3);
        }
        l0 = l0 * alpha0 + rs0;
        l1 = l1 * alpha1 + rs1;
#pragma unroll
        for (int dn = 0; dn < 8; ++dn) {
            o[dn][0] *= alpha0;
            o[dn][1] *= alpha0;
            o[dn][2] *= alpha1;
            o[dn][3] *= alpha1;
        }

        // O += P V: B fragment element (k = key, n = d) = Vs[key][d].
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned short* v0 = Vs + (j * 16 + t * 2) * FA_LDS + g;
#pragma unroll
            for (int dn = 0; dn < 8; ++dn) {
                const unsigned short* v = v0 + dn * 8;
                const unsigned b0 = pack_h2(v[0], v[FA_LDS]);
                const unsigned b1 = pack_h2(v[8 * FA_LDS], v[9 * FA_LDS]);
                mma_m16n8k16(o[dn], pa[j], b0, b1);
            }
        }
    }

    // Finish the row sums across the 4 threads of each group and normalize.
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0;
    const float inv1 = 1.0f / l1;
#pragma unroll
    for (int dn = 0; dn < 8; ++dn) {
        const int c = dn * 8 + t * 2;
        if (r0 < seq_len)
            *reinterpret_cast<unsigned*>(Ob + (long long)r0 * FA_D + c) = pack_f2h2(o[dn][0] * inv0, o[dn][1] * inv0);
        if (r1 < seq_len)
            *reinterpret_cast<unsigned*>(Ob + (long long)r1 * FA_D + c) = pack_f2h2(o[dn][2] * inv1, o[dn][3] * inv1);
    }
}

extern "C" __global__ void flash_attn_ref(const unsigned short* Q, const unsigned short* K,
                                          const unsigned short* V, unsigned short* O,
                                          int batch_heads, int seq_len) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)batch_heads * seq_len) return;
    const long long bh = idx / seq_len;
    const long long row = idx % seq_len;
    const long long base = bh * seq_len * FA_D;
    const unsigned short* q = Q + base + row * FA_D;
    const float scale = 0.125f;  // 1 / sqrt(64)

    float qf[FA_D];
#pragma unroll
    for (int d = 0; d < FA_D; ++d) qf[d] = h2f(q[d]);

    // Pass 1: max of the scaled scores.
    float m = neg_inf();
    for (int j = 0; j < seq_len; ++j) {
        const unsigned short* k = K + base + (long long)j * FA_D;
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < FA_D; ++d) dot += qf[d] * h2f(k[d]);
        m = fmaxf(m, dot * scale);
    }

    // Pass 2: sum of exp and exp-weighted sum of V.
    float acc[FA_D];
#pragma unroll
    for (int d = 0; d < FA_D; ++d) acc[d] = 0.0f;
    float sum = 0.0f;
    for (int j = 0; j < seq_len; ++j) {
        const unsigned short* k = K + base + (long long)j * FA_D;
        const unsigned short* v = V + base + (long long)j * FA_D;
        float dot = 0.0f;
#pragma unroll
        for (int d = 0; d < FA_D; ++d) dot += qf[d] * h2f(k[d]);
        const float p = expf(dot * scale - m);
        sum += p;
#pragma unroll
        for (int d = 0; d < FA_D; ++d) acc[d] += p * h2f(v[d]);
    }

    unsigned short* out = O + base + row * FA_D;
#pragma unroll
    for (int d = 0; d < FA_D; ++d) out[d] = f2h(acc[d] / sum);
}
