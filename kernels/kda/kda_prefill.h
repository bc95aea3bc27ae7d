// KDA chunked prefill: runs one sequence of T tokens through all heads,
// producing every token's output and the final state, so a decode can
// continue from where the prefill stopped.
//
// The chunked form (chunk 64 by default; a last chunk shorter than that is
// fine) is the WY / UT-transform form used by flash-linear-attention's
// chunk_kda, exact with respect to the token-by-token recurrence in exact
// arithmetic. Per chunk with start state S0 and cumulative log decay Gc
// (restarted at each chunk, inclusive of the token itself):
//   A[t,s] = beta_t * sum_i k_t,i k_s,i exp(Gc_t,i - Gc_s,i)      (s < t)
//   M[t,s] =          sum_i q_t,i k_s,i exp(Gc_t,i - Gc_s,i)      (s <= t)
//   T      = (I + A)^-1                     (UT transform, forward
//   substitution) W      = T diag(beta) (exp(Gc) * K),   Ut = T diag(beta) V
//   (WY form) U      = Ut - W S0                      (the chunk's u_t, all at
//   once) O      = (exp(Gc) * Q) S0 + M U S      = exp(Gc_last) * S0 +
//   (exp(Gc_last - Gc) * K)^T U
// Every exponent is <= 0, so nothing overflows however strong the decay.
// The precision mode rounds the operands of every matrix product above and
// of the dot products inside A and M; T is computed in the working type.
//
// Variants:
//   kChunked      the form above (default).
//   kGlobalCumsum the same algebra with Gc taken as differences of ONE
//                 cumulative sum of g over the whole sequence. Its magnitude
//                 grows with length, so in fp32 the differences lose bits:
//                 error grows ~linearly with T. Kept only to demonstrate that
//                 failure class in the precision sweep; never use it.
//   kRecurrent    token by token through the decode kernel (KdaDecode,
//                 tiled variant).
//
// Layout (kda_types.h) with dims.batch = T tokens: q, k, g [T][heads][K];
// v, out [T][heads][V]; beta [T][heads]; state [heads][K][V] (holds the
// initial state on entry, the final state on return).
//
// Thread-safety: thread-safe for disjoint states/outputs; with
// num_threads > 1 heads run on a shared ThreadPool (loops serialized).
#ifndef DENSEGATE_KERNELS_KDA_KDA_PREFILL_H_
#define DENSEGATE_KERNELS_KDA_KDA_PREFILL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/kda/kda_types.h"
#include "kernels/kda/thread_pool.h"

namespace densegate::kernels::kda {

enum class KdaPrefillVariant { kChunked, kGlobalCumsum, kRecurrent };

// "chunked", "global_cumsum", "recurrent" and back.
absl::string_view KdaPrefillVariantName(KdaPrefillVariant v);
absl::StatusOr<KdaPrefillVariant> ParseKdaPrefillVariant(absl::string_view s);

inline constexpr int kKdaDefaultChunk = 64;
inline constexpr int kKdaMaxChunk = 256;

struct KdaPrefillOptions {
  KdaMath math;
  KdaPrefillVariant variant = KdaPrefillVariant::kChunked;
  int chunk_size = kKdaDefaultChunk;  // In [1, kKdaMaxChunk].
  // Threads over heads, the caller included; 1 = calling thread only,
  // 0 = all hardware threads.
  int num_threads = 1;
  ThreadPool* pool = nullptr;  // nullptr = ThreadPool::Shared().
};

// fp32 prefill of dims.batch tokens. InvalidArgument for bad dims (T, heads
// >= 1; K, V in [1, 256]), null pointers, chunk_size outside [1, 256] or a
// negative thread count. Precondition: g <= 0 (after gating); inputs do not
// alias state or out.
absl::Status KdaPrefill(const KdaDims& dims, const KdaInputs<float>& in,
                        float* state, float* out,
                        const KdaPrefillOptions& options);

// The same in fp64 (math.precision is ignored). kRecurrent here is the fp64
// token-by-token reference recurrence (KdaDecodeReference per token).
absl::Status KdaPrefillFp64(const KdaDims& dims, const KdaInputs<double>& in,
                            double* state, double* out,
                            const KdaPrefillOptions& options);

// Shorthand for KdaPrefillFp64 with kRecurrent: the reference everything is
// compared with.
absl::Status KdaRecurrenceReference(const KdaDims& dims,
                                    const KdaInputs<double>& in, double* state,
                                    double* out, const KdaMath& math);

}  // namespace densegate::kernels::kda

#endif  // DENSEGATE_KERNELS_KDA_KDA_PREFILL_H_
