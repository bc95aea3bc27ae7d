// KDA decode step on NVIDIA GPUs: the fused / V-tiled kernel of
// kernels/kda (same layout, same order of operations, same precision modes)
// plus the C-ABI entry points of kda_decode_cuda_entry.h.
//
// One thread block per (sequence x head, 32-column tile of V): 8 warps; lane
// = column (so every warp reads and writes 128 contiguous bytes of a state
// row), warp y owns rows y, y + 8, y + 16, ... of that column in registers.
// The tile's state is read from memory once and written once:
//   prep   q, k normalized (block reductions), gates, rounded operands -> smem
//   pass 1 load rows, x = exp(g_i) * S_ij, partial sum op(x) * op(k_i);
//          reduce the 8 partial sums of each column -> u_j
//   pass 2 S_ij = fma(k_i, u_j, x) stored; partial sum op(S_ij) * op(q_i);
//          reduce -> o_j
// ieee uses plain fp32 FMA; tf32 / tf32_rna / tf32x3 round the operands with
// the bit formulas of kda_cuda_math.h (identical to kernels/kda/precision.h)
// before an FMA, i.e. what the tensor-core input conversion does.
//
// Build: nvcc -c -O3 -std=c++17 -arch=sm_90 -I<repo root> kda_decode.cu
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda/kda_cuda_math.h"
#include "kernels/cuda/kda_decode_cuda_entry.h"

namespace densegate::kernels::cuda {
namespace {

constexpr int kTileV = 32;     // Columns per block: one per lane.
constexpr int kRowGroups = 8;  // Warps per block.
constexpr int kMaxK = 256;

// Sum over the whole block (kTileV x kRowGroups threads) of x, returned to
// every thread. Fixed reduction order: deterministic run to run.
__device__ float BlockSum(float x, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    x += __shfl_xor_sync(0xffffffffu, x, off);
  }
  if (threadIdx.x == 0) scratch[threadIdx.y] = x;
  __syncthreads();
  float t = 0.0f;
#pragma unroll
  for (int w = 0; w < kRowGroups; ++w) t += scratch[w];
  __syncthreads();
  return t;
}

// P: precision; M: rows per thread (>= ceil(K / kRowGroups)).
template <int P, int M>
__global__ void __launch_bounds__(kTileV* kRowGroups)
    KdaDecodeKernel(DgKdaDecodeParams p) {
  const int K = p.k_dim;
  const int V = p.v_dim;
  const int64_t bh = blockIdx.x;
  const int h = static_cast<int>(bh % p.heads);
  const int lane = threadIdx.x;
  const int grp = threadIdx.y;
  const int tid = grp * kTileV + lane;
  const int col = blockIdx.y * kTileV + lane;
  const bool active = col < V;

  __shared__ float s_kn[kMaxK];
  __shared__ float s_decay[kMaxK];
  __shared__ float s_kb[kMaxK];
  __shared__ float s_ks[kMaxK];
  __shared__ float s_qb[kMaxK];
  __shared__ float s_qs[kMaxK];
  __shared__ float s_red[kRowGroups][kTileV];
  __shared__ float s_scratch[kRowGroups];

  // Prep: thread `tid` handles key channel `tid` (K <= 256 = block size).
  float qv = 0.0f, kv = 0.0f;
  if (tid < K) {
    qv = p.q[bh * K + tid];
    kv = p.k[bh * K + tid];
  }
  const float qq = BlockSum(qv * qv, s_scratch);
  const float kk = BlockSum(kv * kv, s_scratch);
  if (tid < K) {
    const float qn =
        qv * (1.0f / sqrtf((qq + p.l2_eps) * static_cast<float>(K)));
    const float kn = kv * (1.0f / sqrtf(kk + p.l2_eps));
    float g = p.g[bh * K + tid];
    if (p.gate_from_raw) {
      g = -expf(p.a_log[h]) *
          DgSoftplus(g + p.dt_bias[static_cast<int64_t>(h) * K + tid]);
    }
    s_kn[tid] = kn;
    s_decay[tid] = expf(g);
    DgSplitOperand(P, kn, &s_kb[tid], &s_ks[tid]);
    DgSplitOperand(P, qn, &s_qb[tid], &s_qs[tid]);
  }
  float beta = p.beta[bh];
  if (p.gate_from_raw) beta = DgSigmoid(beta);
  __syncthreads();

  float* S = p.state + bh * K * V;
  float x[M];
  float acc = 0.0f;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int i = grp + kRowGroups * m;
    x[m] = 0.0f;
    if (active && i < K) {
      x[m] = S[static_cast<int64_t>(i) * V + col] * s_decay[i];
      acc = DgAccum<P>(acc, x[m], s_kb[i], s_ks[i]);
    }
  }
  s_red[grp][lane] = acc;
  __syncthreads();
  float w = 0.0f;
#pragma unroll
  for (int r = 0; r < kRowGroups; ++r) w += s_red[r][lane];
  const float u = active ? beta * (p.v[bh * V + col] - w) : 0.0f;
  __syncthreads();  // s_red is reused below.

  float o = 0.0f;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int i = grp + kRowGroups * m;
    if (active && i < K) {
      const float s_new = fmaf(s_kn[i], u, x[m]);
      S[static_cast<int64_t>(i) * V + col] = s_new;
      o = DgAccum<P>(o, s_new, s_qb[i], s_qs[i]);
    }
  }
  s_red[grp][lane] = o;
  __syncthreads();
  if (grp == 0 && active) {
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < kRowGroups; ++r) t += s_red[r][lane];
    p.out[bh * V + col] = t;
  }
}

template <int P>
cudaError_t LaunchForPrecision(const DgKdaDecodeParams& p) {
  const dim3 block(kTileV, kRowGroups);
  const dim3 grid(
      static_cast<unsigned>(p.batch) * static_cast<unsigned>(p.heads),
      static_cast<unsigned>((p.v_dim + kTileV - 1) / kTileV));
  const int rows = (p.k_dim + kRowGroups - 1) / kRowGroups;
  if (rows <= 4) {
    KdaDecodeKernel<P, 4><<<grid, block>>>(p);
  } else if (rows <= 8) {
    KdaDecodeKernel<P, 8><<<grid, block>>>(p);
  } else if (rows <= 16) {
    KdaDecodeKernel<P, 16><<<grid, block>>>(p);
  } else {
    KdaDecodeKernel<P, 32><<<grid, block>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace
}  // namespace densegate::kernels::cuda

using densegate::kernels::cuda::LaunchForPrecision;

extern "C" {

int DgCudaDeviceCount(int* count) {
  *count = 0;
  const cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaErrorNoDevice) {
    *count = 0;
    return 0;
  }
  return static_cast<int>(e);
}

int DgCudaMalloc(void** ptr, size_t bytes) {
  return static_cast<int>(cudaMalloc(ptr, bytes));
}

int DgCudaFree(void* ptr) { return static_cast<int>(cudaFree(ptr)); }

int DgCudaMemcpyHostToDevice(void* dst, const void* src, size_t bytes) {
  return static_cast<int>(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

int DgCudaMemcpyDeviceToHost(void* dst, const void* src, size_t bytes) {
  return static_cast<int>(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

int DgCudaDeviceSynchronize(void) {
  return static_cast<int>(cudaDeviceSynchronize());
}

const char* DgCudaErrorString(int code) {
  if (code == kDgCudaNotBuilt) return "built without CUDA";
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

int DgKdaDecodeLaunch(const DgKdaDecodeParams* p) {
  using namespace densegate::kernels::cuda;
  switch (p->precision) {
    case kDgIeee:
      return static_cast<int>(LaunchForPrecision<kDgIeee>(*p));
    case kDgTf32:
      return static_cast<int>(LaunchForPrecision<kDgTf32>(*p));
    case kDgTf32Rna:
      return static_cast<int>(LaunchForPrecision<kDgTf32Rna>(*p));
    case kDgTf32x3:
      return static_cast<int>(LaunchForPrecision<kDgTf32x3>(*p));
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // extern "C"
