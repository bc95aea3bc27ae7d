// KDA (Kimi Delta Attention) decode: one recurrent step for a batch of
// sequences x heads, with an fp64 reference and three fp32 variants.
//
// Per head, with state S (K x V), in this order:
//   q <- q / sqrt(|q|^2 + eps) * K^-1/2,   k <- k / sqrt(|k|^2 + eps)
//   S[i, :] *= exp(g[i])                    (per-key-channel decay, g <= 0)
//   u = beta * (v - S^T k)
//   S += k u^T
//   o = S^T q                               (from the updated state)
// Optionally g and beta are computed from raw gate inputs (KdaGateMode).
// The precision mode rounds the operands of the two dot products S^T k and
// S^T q (state, k and q) before they are multiplied; accumulation is fp32.
//
// Variants (same interface, same layout, see kda_types.h):
//   kNaive  the tensor-at-a-time form of library references: decay, k^T S,
//           rank-1 update and readout are each a pass over ALL sequences'
//           and heads' states. The 1.0x baseline.
//   kFused  per head, two passes: read S computing k^T(exp(g) S); write
//           exp(g) S + k u^T while accumulating o.
//   kTiled  per head and per block of V-columns kept in L1 (64 columns on
//           the AVX-512 and AVX2 paths, 32 on the portable one): one read
//           and one write of S from memory per step, the next block
//           prefetched while the current one is rewritten; AVX-512 or
//           AVX2/FMA when the CPU has it (portable fallback),
//           multi-threaded over (sequence, head).
// Every (sequence, head) is computed by the same code whatever the batch or
// thread count, so outputs are bit-identical across batch compositions and
// thread counts for a given variant and SIMD path. In the TF32 modes all
// variants and all SIMD paths give identical bits (each dot-product term is
// an exact fp32 product); in kIeee the vector paths use FMA in the dot
// products and kNaive forms exp(g)*S before multiplying by k, so they differ
// from the others in the last bits (all are fp32-accurate). The AVX-512 and
// AVX2 paths give the same bits in every mode (same operations per lane).
//
// The environment variable DENSEGATE_KDA_SIMD (read at each call) caps what
// kAuto picks: "portable" or "avx2"; an explicit SimdPath ignores it.
//
// Thread-safety: the functions are thread-safe for disjoint outputs/states;
// kTiled with num_threads > 1 uses a shared ThreadPool whose loops are
// serialized, so concurrent multi-threaded calls wait for each other.
#ifndef DENSEGATE_KERNELS_KDA_KDA_DECODE_H_
#define DENSEGATE_KERNELS_KDA_KDA_DECODE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/kda/kda_types.h"
#include "kernels/kda/precision.h"
#include "kernels/kda/thread_pool.h"

namespace densegate::kernels::kda {

enum class KdaDecodeVariant { kNaive, kFused, kTiled };

// "naive", "fused", "tiled" and back.
absl::string_view KdaDecodeVariantName(KdaDecodeVariant v);
absl::StatusOr<KdaDecodeVariant> ParseKdaDecodeVariant(absl::string_view s);

enum class SimdPath {
  kAuto,      // The widest of the below the CPU has (see DENSEGATE_KDA_SIMD).
  kPortable,  // Plain C++ (whatever the compiler's baseline target gives).
  kAvx2,      // AVX2/FMA; FailedPrecondition where the CPU lacks it.
  kAvx512,    // kTiled in AVX-512F (kFused runs its AVX2 build);
              // FailedPrecondition where the CPU lacks AVX-512F or AVX2/FMA.
};

// The path kAuto resolves to now; "portable", "avx2" or "avx512".
SimdPath ResolvedAutoSimdPath();
absl::string_view SimdPathName(SimdPath p);
// Whether this CPU (and build) can run SimdPath::kAvx2.
bool CpuHasAvx2Fma();
// Whether this CPU (and build) can run SimdPath::kAvx512.
bool CpuHasAvx512();

// Sentinel for "all hardware threads".
inline constexpr int kAllThreads = 0;

struct KdaDecodeOptions {
  KdaMath math;
  KdaDecodeVariant variant = KdaDecodeVariant::kTiled;
  // kTiled only: threads working on one call, the caller included. 1 runs
  // on the calling thread; kAllThreads uses ThreadPool::HardwareThreads().
  int num_threads = 1;
  // kFused and kTiled.
  SimdPath simd = SimdPath::kAuto;
  // kTiled only: the pool to use; nullptr means ThreadPool::Shared().
  ThreadPool* pool = nullptr;
};

// One decode step. `state` [batch][heads][K][V] is updated in place; `out`
// [batch][heads][V] receives o. Inputs must not alias state or out.
// Returns InvalidArgument for bad dims (K or V outside [1, 256], batch or
// heads < 1), missing pointers or a negative thread count, and
// FailedPrecondition for a SimdPath this CPU cannot run.
absl::Status KdaDecode(const KdaDims& dims, const KdaInputs<float>& in,
                       float* state, float* out,
                       const KdaDecodeOptions& options);

// The fp64 reference: the same step in double precision throughout
// (math.precision is ignored; it is the exact side of every comparison).
absl::Status KdaDecodeReference(const KdaDims& dims,
                                const KdaInputs<double>& in, double* state,
                                double* out, const KdaMath& math);

}  // namespace densegate::kernels::kda

#endif  // DENSEGATE_KERNELS_KDA_KDA_DECODE_H_
