// Scalar math shared by the KDA CUDA kernel and its host-side tests: TF32
// operand rounding with the same bit formulas as kernels/kda/precision.h,
// and the gate functions. Compiles as host code with any C++ compiler and as
// __host__ __device__ code under nvcc, so the CPU test checks the very
// functions the GPU runs. Pure functions; thread-safe.
#ifndef DENSEGATE_KERNELS_CUDA_KDA_CUDA_MATH_H_
#define DENSEGATE_KERNELS_CUDA_KDA_CUDA_MATH_H_

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define DG_HD __host__ __device__ __forceinline__
#else
#define DG_HD inline
#endif

namespace densegate::kernels::cuda {

// Must match densegate::kernels::kda::Precision.
enum DgPrecision : int {
  kDgIeee = 0,
  kDgTf32 = 1,
  kDgTf32Rna = 2,
  kDgTf32x3 = 3,
};

DG_HD uint32_t DgFloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  memcpy(&b, &x, sizeof(b));
  return b;
#endif
}

DG_HD float DgBitsFloat(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  memcpy(&x, &b, sizeof(x));
  return x;
#endif
}

// bits & 0xFFFFE000; NaN/Inf unchanged.
DG_HD float DgTf32(float x) {
  const uint32_t b = DgFloatBits(x);
  if ((b & 0x7F800000u) == 0x7F800000u) return x;
  return DgBitsFloat(b & 0xFFFFE000u);
}

// (bits + 0x1000) & 0xFFFFE000; NaN/Inf unchanged (finite may become Inf).
DG_HD float DgTf32Rna(float x) {
  const uint32_t b = DgFloatBits(x);
  if ((b & 0x7F800000u) == 0x7F800000u) return x;
  return DgBitsFloat((b + 0x1000u) & 0xFFFFE000u);
}

// acc + x * y with both operands rounded as precision P says; for tf32x3
// y_small is y's remainder (y itself is the big part).
template <int P>
DG_HD float DgAccum(float acc, float x, float y_big, float y_small) {
  if (P == kDgIeee) return fmaf(x, y_big, acc);
  if (P == kDgTf32) return fmaf(DgTf32(x), y_big, acc);
  if (P == kDgTf32Rna) return fmaf(DgTf32Rna(x), y_big, acc);
  const float xb = DgTf32(x);
  const float xs = DgTf32(x - xb);
  acc = fmaf(xs, y_big, acc);
  acc = fmaf(xb, y_small, acc);
  return fmaf(xb, y_big, acc);
}

// The operand of the other side: big part (rounded) and small part.
DG_HD void DgSplitOperand(int precision, float y, float* big, float* small) {
  if (precision == kDgTf32) {
    *big = DgTf32(y);
    *small = 0.0f;
  } else if (precision == kDgTf32Rna) {
    *big = DgTf32Rna(y);
    *small = 0.0f;
  } else if (precision == kDgTf32x3) {
    *big = DgTf32(y);
    *small = DgTf32(y - *big);
  } else {
    *big = y;
    *small = 0.0f;
  }
}

DG_HD float DgSoftplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
DG_HD float DgSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

}  // namespace densegate::kernels::cuda

#endif  // DENSEGATE_KERNELS_CUDA_KDA_CUDA_MATH_H_
