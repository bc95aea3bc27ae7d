#include "kernels/kda/kda_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/kda/kda_decode.h"
#include "kernels/kda/kda_internal.h"
#include "kernels/kda/precision.h"

namespace densegate::kernels::kda {
namespace {

using internal::HeadInputs;
using internal::PrepareHead;

// Rounds a matrix operand into big (and, for tf32x3, small) parts. For
// double (the fp64 versions) there is no rounding.
template <typename T>
void SplitOperand(Precision p, const T* x, int64_t n, std::vector<T>* big,
                  std::vector<T>* small) {
  big->resize(n);
  if constexpr (std::is_same_v<T, float>) {
    if (p == Precision::kTf32x3) {
      small->resize(n);
      for (int64_t i = 0; i < n; ++i) {
        const Tf32Split s = SplitTf32(x[i]);
        (*big)[i] = s.big;
        (*small)[i] = s.small;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) (*big)[i] = RoundOperand(p, x[i]);
  } else {
    (void)p;
    std::copy(x, x + n, big->begin());
  }
}

template <typename T>
struct GemmScratch {
  std::vector<T> a_big, a_small, b_big, b_small;
};

// C (m x n) = [C +] A (m x kd) * B (kd x n), all row-major, with A's and B's
// elements rounded as `p` says before they are multiplied; fp32 (or fp64)
// accumulation in the order of kd for each element.
template <typename T>
void Gemm(Precision p, int m, int n, int kd, const T* A, const T* B, T* C,
          bool accumulate, GemmScratch<T>* s) {
  if (!accumulate) std::fill(C, C + static_cast<int64_t>(m) * n, T(0));
  const bool three = std::is_same_v<T, float> && p == Precision::kTf32x3;
  const bool plain = !std::is_same_v<T, float> || p == Precision::kIeee;
  const T* ab = A;
  const T* bb = B;
  if (!plain) {
    SplitOperand(p, A, static_cast<int64_t>(m) * kd, &s->a_big, &s->a_small);
    SplitOperand(p, B, static_cast<int64_t>(kd) * n, &s->b_big, &s->b_small);
    ab = s->a_big.data();
    bb = s->b_big.data();
  }
  for (int i = 0; i < m; ++i) {
    T* c = C + static_cast<int64_t>(i) * n;
    for (int r = 0; r < kd; ++r) {
      const T a = ab[static_cast<int64_t>(i) * kd + r];
      const T* b = bb + static_cast<int64_t>(r) * n;
      if (three) {
        // Same term order as AccumTerm<kTf32x3>: small terms first.
        const T as = s->a_small[static_cast<int64_t>(i) * kd + r];
        const T* bs = s->b_small.data() + static_cast<int64_t>(r) * n;
        for (int j = 0; j < n; ++j) {
          T acc = c[j] + as * b[j];
          acc = acc + a * bs[j];
          c[j] = acc + a * b[j];
        }
      } else {
        for (int j = 0; j < n; ++j) c[j] = c[j] + a * b[j];
      }
    }
  }
}

// One product of a dot product inside A or M.
template <typename T>
inline T MulAs(Precision p, T a, T b) {
  if constexpr (std::is_same_v<T, float>) {
    return MulOperands(p, a, b);
  } else {
    (void)p;
    return a * b;
  }
}

// Everything one head needs across chunks; allocated once per head.
template <typename T>
struct ChunkWork {
  ChunkWork(int C, int K, int V)
      : q(C * K),
        k(C * K),
        cum(C * K),
        beta(C),
        v(C * V),
        base(K),
        gsum(K),
        A(C * C),
        M(C * C),
        Tm(C * C),
        bk(C * K),
        bv(C * V),
        qd(C * K),
        kend_t(K * C),
        W(C * K),
        Ut(C * V),
        U(C * V),
        O(C * V),
        e(K) {}
  std::vector<T> q, k, cum, beta, v, base, gsum;
  std::vector<T> A, M, Tm, bk, bv, qd, kend_t, W, Ut, U, O, e;
  GemmScratch<T> gemm;
  HeadInputs<T> head;
};

// Runs all chunks of one head. S is that head's [K][V] state.
template <typename T>
void PrefillHeadChunked(const KdaDims& dims, const KdaInputs<T>& in,
                        const KdaPrefillOptions& opt, int head, T* S, T* out) {
  const int K = dims.k_dim;
  const int V = dims.v_dim;
  const int H = dims.heads;
  const int C = opt.chunk_size;
  const int64_t n_tokens = dims.batch;
  const Precision p = opt.math.precision;
  const bool global = opt.variant == KdaPrefillVariant::kGlobalCumsum;
  ChunkWork<T> w(C, K, V);
  std::fill(w.gsum.begin(), w.gsum.end(), T(0));

  for (int64_t t0 = 0; t0 < n_tokens; t0 += C) {
    const int L = static_cast<int>(std::min<int64_t>(C, n_tokens - t0));
    // Gather the chunk's prepared inputs and the cumulative log decay.
    // cum - base is the log decay from the chunk start through each token.
    if (global) {
      std::copy(w.gsum.begin(), w.gsum.end(), w.base.begin());
    } else {
      std::fill(w.base.begin(), w.base.end(), T(0));
    }
    for (int c = 0; c < L; ++c) {
      PrepareHead<T>(dims, in, opt.math, t0 + c, head, &w.head);
      T* qc = &w.q[c * K];
      T* kc = &w.k[c * K];
      T* cc = &w.cum[c * K];
      for (int i = 0; i < K; ++i) {
        qc[i] = w.head.qn[i];
        kc[i] = w.head.kn[i];
        if (global) {
          w.gsum[i] += w.head.g[i];
          cc[i] = w.gsum[i];
        } else {
          cc[i] = (c == 0 ? T(0) : w.cum[(c - 1) * K + i]) + w.head.g[i];
        }
      }
      w.beta[c] = w.head.beta;
      const T* vsrc = in.v + ((t0 + c) * H + head) * static_cast<int64_t>(V);
      std::copy(vsrc, vsrc + V, &w.v[c * V]);
    }

    // A (strictly lower, scaled by beta_t) and M (lower incl. diagonal).
    std::fill(w.A.begin(), w.A.begin() + L * L, T(0));
    std::fill(w.M.begin(), w.M.begin() + L * L, T(0));
    for (int t = 0; t < L; ++t) {
      const T* ct = &w.cum[t * K];
      const T* qt = &w.q[t * K];
      const T* kt = &w.k[t * K];
      for (int s = 0; s <= t; ++s) {
        const T* cs = &w.cum[s * K];
        const T* ks = &w.k[s * K];
        T a = 0, m = 0;
        for (int i = 0; i < K; ++i) {
          const T e = internal::DecayExp<T>(ct[i] - cs[i]);
          a += MulAs<T>(p, kt[i] * e, ks[i]);
          m += MulAs<T>(p, qt[i] * e, ks[i]);
        }
        if (s < t) w.A[t * L + s] = w.beta[t] * a;
        w.M[t * L + s] = m;
      }
    }

    // UT transform: Tm = (I + A)^-1 by forward substitution.
    std::fill(w.Tm.begin(), w.Tm.begin() + L * L, T(0));
    for (int t = 0; t < L; ++t) {
      w.Tm[t * L + t] = 1;
      for (int s = 0; s < t; ++s) {
        T acc = 0;
        for (int r = s; r < t; ++r) acc += w.A[t * L + r] * w.Tm[r * L + s];
        w.Tm[t * L + s] = -acc;
      }
    }

    // Operands decayed to the chunk start / to the chunk end.
    const T* clast = &w.cum[(L - 1) * K];
    for (int c = 0; c < L; ++c) {
      const T* cc = &w.cum[c * K];
      for (int i = 0; i < K; ++i) {
        const T to_start = internal::DecayExp<T>(cc[i] - w.base[i]);
        w.bk[c * K + i] = w.beta[c] * (to_start * w.k[c * K + i]);
        w.qd[c * K + i] = to_start * w.q[c * K + i];
        w.kend_t[i * L + c] =
            internal::DecayExp<T>(clast[i] - cc[i]) * w.k[c * K + i];
      }
      for (int j = 0; j < V; ++j) w.bv[c * V + j] = w.beta[c] * w.v[c * V + j];
    }

    // WY form: W = Tm diag(beta) K~, Ut = Tm diag(beta) V; U = Ut - W S0.
    Gemm<T>(p, L, K, L, w.Tm.data(), w.bk.data(), w.W.data(), false, &w.gemm);
    Gemm<T>(p, L, V, L, w.Tm.data(), w.bv.data(), w.Ut.data(), false, &w.gemm);
    Gemm<T>(p, L, V, K, w.W.data(), S, w.U.data(), false, &w.gemm);
    for (int64_t x = 0; x < static_cast<int64_t>(L) * V; ++x) {
      w.U[x] = w.Ut[x] - w.U[x];
    }
    // O = Q~ S0 + M U.
    Gemm<T>(p, L, V, K, w.qd.data(), S, w.O.data(), false, &w.gemm);
    Gemm<T>(p, L, V, L, w.M.data(), w.U.data(), w.O.data(), true, &w.gemm);
    for (int c = 0; c < L; ++c) {
      std::copy(&w.O[c * V], &w.O[c * V] + V,
                out + ((t0 + c) * H + head) * static_cast<int64_t>(V));
    }
    // S = exp(Gc_last) S0 + (exp(Gc_last - Gc) K)^T U.
    for (int i = 0; i < K; ++i) {
      const T d = internal::DecayExp<T>(clast[i] - w.base[i]);
      T* row = S + static_cast<int64_t>(i) * V;
      for (int j = 0; j < V; ++j) row[j] *= d;
    }
    Gemm<T>(p, K, V, L, w.kend_t.data(), w.U.data(), S, true, &w.gemm);
  }
}

template <typename T>
absl::Status ValidatePrefill(const KdaDims& dims, const KdaInputs<T>& in,
                             const T* state, const T* out,
                             const KdaPrefillOptions& opt, const char* what) {
  if (auto s = ValidateKdaInputs(dims, in, opt.math.gate_mode, what); !s.ok()) {
    return s;
  }
  if (state == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: state and out must not be null", what));
  }
  if (opt.chunk_size < 1 || opt.chunk_size > kKdaMaxChunk) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: chunk_size must be in [1, %d], got %d", what,
                        kKdaMaxChunk, opt.chunk_size));
  }
  if (opt.num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: num_threads must be >= 0 (0 = all hardware threads), got %d", what,
        opt.num_threads));
  }
  return absl::OkStatus();
}

// Inputs of token t as a batch-1 decode step.
template <typename T>
KdaInputs<T> TokenInputs(const KdaDims& dims, const KdaInputs<T>& in,
                         int64_t t) {
  const int64_t hk = static_cast<int64_t>(dims.heads) * dims.k_dim;
  const int64_t hv = static_cast<int64_t>(dims.heads) * dims.v_dim;
  KdaInputs<T> r = in;
  r.q = in.q + t * hk;
  r.k = in.k + t * hk;
  r.g = in.g + t * hk;
  r.v = in.v + t * hv;
  r.beta = in.beta + t * dims.heads;
  return r;
}

template <typename T>
void RunChunkedOverHeads(const KdaDims& dims, const KdaInputs<T>& in, T* state,
                         T* out, const KdaPrefillOptions& opt) {
  const int64_t kv = static_cast<int64_t>(dims.k_dim) * dims.v_dim;
  auto body = [&](int64_t h) {
    PrefillHeadChunked<T>(dims, in, opt, static_cast<int>(h), state + h * kv,
                          out);
  };
  const int threads =
      opt.num_threads == 0 ? ThreadPool::HardwareThreads() : opt.num_threads;
  if (threads <= 1 || dims.heads <= 1) {
    for (int h = 0; h < dims.heads; ++h) body(h);
  } else {
    ThreadPool& pool = opt.pool != nullptr ? *opt.pool : ThreadPool::Shared();
    pool.ParallelFor(dims.heads, threads, body);
  }
}

}  // namespace

absl::string_view KdaPrefillVariantName(KdaPrefillVariant v) {
  switch (v) {
    case KdaPrefillVariant::kChunked:
      return "chunked";
    case KdaPrefillVariant::kGlobalCumsum:
      return "global_cumsum";
    case KdaPrefillVariant::kRecurrent:
      return "recurrent";
  }
  return "unknown";
}

absl::StatusOr<KdaPrefillVariant> ParseKdaPrefillVariant(absl::string_view s) {
  for (KdaPrefillVariant v :
       {KdaPrefillVariant::kChunked, KdaPrefillVariant::kGlobalCumsum,
        KdaPrefillVariant::kRecurrent}) {
    if (s == KdaPrefillVariantName(v)) return v;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown KDA prefill variant \"%s\": expected chunked, global_cumsum "
      "or recurrent",
      s));
}

absl::Status KdaPrefill(const KdaDims& dims, const KdaInputs<float>& in,
                        float* state, float* out,
                        const KdaPrefillOptions& options) {
  if (auto s = ValidatePrefill(dims, in, state, out, options, "KDA prefill");
      !s.ok()) {
    return s;
  }
  if (options.variant == KdaPrefillVariant::kRecurrent) {
    KdaDecodeOptions d;
    d.math = options.math;
    d.variant = KdaDecodeVariant::kTiled;
    d.num_threads = options.num_threads;
    d.pool = options.pool;
    const KdaDims step{1, dims.heads, dims.k_dim, dims.v_dim};
    const int64_t hv = static_cast<int64_t>(dims.heads) * dims.v_dim;
    for (int64_t t = 0; t < dims.batch; ++t) {
      if (auto s =
              KdaDecode(step, TokenInputs(dims, in, t), state, out + t * hv, d);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  RunChunkedOverHeads<float>(dims, in, state, out, options);
  return absl::OkStatus();
}

absl::Status KdaPrefillFp64(const KdaDims& dims, const KdaInputs<double>& in,
                            double* state, double* out,
                            const KdaPrefillOptions& options) {
  if (auto s =
          ValidatePrefill(dims, in, state, out, options, "KDA prefill (fp64)");
      !s.ok()) {
    return s;
  }
  if (options.variant == KdaPrefillVariant::kRecurrent) {
    const KdaDims step{1, dims.heads, dims.k_dim, dims.v_dim};
    const int64_t hv = static_cast<int64_t>(dims.heads) * dims.v_dim;
    for (int64_t t = 0; t < dims.batch; ++t) {
      if (auto s = KdaDecodeReference(step, TokenInputs(dims, in, t), state,
                                      out + t * hv, options.math);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  RunChunkedOverHeads<double>(dims, in, state, out, options);
  return absl::OkStatus();
}

absl::Status KdaRecurrenceReference(const KdaDims& dims,
                                    const KdaInputs<double>& in, double* state,
                                    double* out, const KdaMath& math) {
  KdaPrefillOptions opt;
  opt.math = math;
  opt.variant = KdaPrefillVariant::kRecurrent;
  return KdaPrefillFp64(dims, in, state, out, opt);
}

}  // namespace densegate::kernels::kda
