// Shapes, input bundles and options shared by the KDA (Kimi Delta
// Attention) decode and prefill kernels.
//
// Memory layout (all dense, row-major, no padding; the same for every
// variant, for the fp64 references and for the CUDA kernel):
//   state  [batch][heads][K][V]   fp32 (fp64 for the references)
//   q, k   [batch][heads][K]
//   g      [batch][heads][K]      log decay per key channel (<= 0), or the
//                                 raw gate input when gates are computed
//   beta   [batch][heads]         write strength in (0, 1), or its logit
//   v, o   [batch][heads][V]
//   a_log  [heads]                only for KdaGateMode::kFromRaw
//   dt_bias[heads][K]             only for KdaGateMode::kFromRaw
// For prefill the leading "batch" axis is the token axis of one sequence
// ([T][heads][...]) and the state has no batch axis ([heads][K][V]).
//
// Plain structs, no behaviour beyond validation; thread-compatible.
#ifndef DENSEGATE_KERNELS_KDA_KDA_TYPES_H_
#define DENSEGATE_KERNELS_KDA_KDA_TYPES_H_

#include "absl/status/status.h"
#include "kernels/kda/precision.h"

namespace densegate::kernels::kda {

// Largest K and V the kernels accept (stack scratch is sized by it).
inline constexpr int kKdaMaxDim = 256;

struct KdaDims {
  int batch = 1;  // Sequences (decode) or tokens (prefill).
  int heads = 32;
  int k_dim = 128;
  int v_dim = 128;
};

// How g and beta are given.
enum class KdaGateMode {
  // g is the log decay (<= 0) and beta the write strength, used as they are.
  kPrecomputed,
  // g holds g_raw and beta holds b_raw; the kernel computes
  //   g    = -exp(a_log[h]) * softplus(g_raw + dt_bias[h][k])
  //   beta = sigmoid(b_raw)
  // as Kimi Linear's gate does.
  kFromRaw,
};

// Input pointers for one step (decode) or one sequence (prefill). T is float
// for the kernels and double for the references.
template <typename T>
struct KdaInputs {
  const T* q = nullptr;
  const T* k = nullptr;
  const T* v = nullptr;
  const T* g = nullptr;
  const T* beta = nullptr;
  const T* a_log = nullptr;    // kFromRaw only.
  const T* dt_bias = nullptr;  // kFromRaw only.
};

// Numerics shared by every variant.
struct KdaMath {
  KdaGateMode gate_mode = KdaGateMode::kPrecomputed;
  // q and k are divided by sqrt(sum x^2 + l2_eps).
  double l2_eps = 1e-6;
  // Operand rounding of the dot products (ignored by the fp64 references).
  Precision precision = Precision::kIeee;
};

// Checks 1 <= batch, 1 <= heads, 1 <= K, V <= kKdaMaxDim. `what` names the
// caller in the message ("KDA decode").
absl::Status ValidateKdaDims(const KdaDims& dims, const char* what);

// Checks the pointers the gate mode needs are set (and the dims).
template <typename T>
absl::Status ValidateKdaInputs(const KdaDims& dims, const KdaInputs<T>& in,
                               KdaGateMode gate_mode, const char* what);

}  // namespace densegate::kernels::kda

#endif  // DENSEGATE_KERNELS_KDA_KDA_TYPES_H_
