#include "kernels/kda/kda_decode.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/kda/kda_internal.h"

namespace densegate::kernels::kda {
namespace {

using internal::AccumTerm;
using internal::HeadArgs;
using internal::HeadInputs;
using internal::MakeOperand;
using internal::Operand;
using internal::PrepareHead;

constexpr const char* kWhat = "KDA decode";

// ---------------------------------------------------------------------------
// Portable tiled kernel.

// Block width in V columns: 32 floats x K rows (16 KiB at K = 128) stay in L1
// between the two passes.
constexpr int kBlock = 32;

// One block of columns [v0, v0 + width). kW > 0 fixes the width at compile
// time (full blocks: lets the compiler vectorize the inner loops); kW == 0
// takes it from `w_rt` (the last, partial block).
// `next` is row 0 of the block processed after this one (row stride V),
// prefetched during pass 2 so the next pass 1 does not wait on memory.
template <Precision P, int kW>
void PortableBlock(const HeadArgs& a, int v0, int w_rt, const float* next) {
  const int w = kW > 0 ? kW : w_rt;
  const int K = a.k_dim;
  const int64_t V = a.v_dim;
  float acc[kBlock] = {};
  for (int i = 0; i < K; ++i) {
    const float* row = a.state + i * V + v0;
    const float d = a.decay[i];
    const float dk = a.dk[i];
    const float kb = a.k_op->big[i];
    const float ks = a.k_op->small[i];
    for (int j = 0; j < w; ++j) {
      acc[j] = internal::Pass1Term<P>(acc[j], row[j], d, dk, kb, ks);
    }
  }
  float u[kBlock];
  for (int j = 0; j < w; ++j) u[j] = a.beta * (a.v[v0 + j] - acc[j]);
  float o[kBlock] = {};
  for (int i = 0; i < K; ++i) {
    float* row = a.state + i * V + v0;
    const float d = a.decay[i];
    const float kk = a.kn[i];
    const float qb = a.q_op->big[i];
    const float qs = a.q_op->small[i];
    internal::PrefetchLine(next, i * V);
    internal::PrefetchLine(next, i * V + 16);
    for (int j = 0; j < w; ++j) {
      const float x = row[j] * d + kk * u[j];
      row[j] = x;
      o[j] = AccumTerm<P>(o[j], x, qb, qs);
    }
  }
  for (int j = 0; j < w; ++j) a.out[v0 + j] = o[j];
}

template <Precision P>
void PortableHead(const HeadArgs& a) {
  const int V = a.v_dim;
  const float* next_head = a.next_head;
  auto next = [&](int v_next) {
    return v_next < V ? a.state + v_next : next_head;
  };
  int v0 = 0;
  for (; v0 + kBlock <= V; v0 += kBlock) {
    PortableBlock<P, kBlock>(a, v0, kBlock, next(v0 + kBlock));
  }
  if (v0 < V) PortableBlock<P, 0>(a, v0, V - v0, next_head);
}

// ---------------------------------------------------------------------------
// Fused kernel, portable build of internal::FusedHeadBody.

template <Precision P>
void FusedHead(const HeadArgs& a) {
  internal::FusedHeadBody<P>(a);
}

using HeadFn = void (*)(const HeadArgs&);

HeadFn PortableHeadFor(Precision p) {
  switch (p) {
    case Precision::kIeee:
      return &PortableHead<Precision::kIeee>;
    case Precision::kTf32:
      return &PortableHead<Precision::kTf32>;
    case Precision::kTf32Rna:
      return &PortableHead<Precision::kTf32Rna>;
    case Precision::kTf32x3:
      return &PortableHead<Precision::kTf32x3>;
  }
  return &PortableHead<Precision::kIeee>;
}

HeadFn FusedHeadFor(Precision p) {
  switch (p) {
    case Precision::kIeee:
      return &FusedHead<Precision::kIeee>;
    case Precision::kTf32:
      return &FusedHead<Precision::kTf32>;
    case Precision::kTf32Rna:
      return &FusedHead<Precision::kTf32Rna>;
    case Precision::kTf32x3:
      return &FusedHead<Precision::kTf32x3>;
  }
  return &FusedHead<Precision::kIeee>;
}

// Scratch for one head: prepared inputs and rounded operands.
struct HeadScratch {
  HeadInputs<float> in;
  float dk[kKdaMaxDim];
  Operand k_op;
  Operand q_op;
};

// Prepares head (b, h) and runs `fn` on it. `next_bh` is the head this
// thread runs next (-1 if none), for prefetching.
void RunHead(const KdaDims& dims, const KdaInputs<float>& in,
             const KdaMath& math, float* state, float* out, int64_t bh,
             int64_t next_bh, HeadFn fn) {
  HeadScratch s;
  const int64_t b = bh / dims.heads;
  const int h = static_cast<int>(bh % dims.heads);
  PrepareHead<float>(dims, in, math, b, h, &s.in);
  MakeOperand(math.precision, s.in.kn, dims.k_dim, &s.k_op);
  MakeOperand(math.precision, s.in.qn, dims.k_dim, &s.q_op);
  for (int i = 0; i < dims.k_dim; ++i) s.dk[i] = s.in.decay[i] * s.in.kn[i];
  HeadArgs a;
  a.k_dim = dims.k_dim;
  a.v_dim = dims.v_dim;
  a.precision = math.precision;
  a.kn = s.in.kn;
  a.decay = s.in.decay;
  a.dk = s.dk;
  a.k_op = &s.k_op;
  a.q_op = &s.q_op;
  a.beta = s.in.beta;
  a.v = in.v + bh * dims.v_dim;
  const int64_t kv = static_cast<int64_t>(dims.k_dim) * dims.v_dim;
  a.state = state + bh * kv;
  a.out = out + bh * dims.v_dim;
  a.next_head = next_bh >= 0 ? state + next_bh * kv : a.state;
  fn(a);
}

// ---------------------------------------------------------------------------
// Naive: one pass over every state per step of the recurrence.

// result[bh][j] = sum_i op(state[bh][i][j]) * op(x[bh][i]) for every head.
template <Precision P>
void NaiveDot(int64_t heads_total, int K, int V, const float* state,
              const float* x_big, const float* x_small, float* result) {
  for (int64_t bh = 0; bh < heads_total; ++bh) {
    const float* s = state + bh * K * V;
    const float* xb = x_big + bh * K;
    const float* xs = x_small + bh * K;
    float* r = result + bh * V;
    for (int j = 0; j < V; ++j) r[j] = 0.0f;
    for (int i = 0; i < K; ++i) {
      const float b = xb[i];
      const float sm = xs[i];
      for (int j = 0; j < V; ++j) {
        r[j] = AccumTerm<P>(r[j], s[i * V + j], b, sm);
      }
    }
  }
}

using NaiveDotFn = void (*)(int64_t, int, int, const float*, const float*,
                            const float*, float*);

NaiveDotFn NaiveDotFor(Precision p) {
  switch (p) {
    case Precision::kIeee:
      return &NaiveDot<Precision::kIeee>;
    case Precision::kTf32:
      return &NaiveDot<Precision::kTf32>;
    case Precision::kTf32Rna:
      return &NaiveDot<Precision::kTf32Rna>;
    case Precision::kTf32x3:
      return &NaiveDot<Precision::kTf32x3>;
  }
  return &NaiveDot<Precision::kIeee>;
}

void DecodeNaive(const KdaDims& dims, const KdaInputs<float>& in,
                 const KdaMath& math, float* state, float* out) {
  const int K = dims.k_dim;
  const int V = dims.v_dim;
  const int64_t n = static_cast<int64_t>(dims.batch) * dims.heads;
  const int64_t kv = static_cast<int64_t>(K) * V;
  // Intermediate tensors, as a library reference materializes them:
  // [n][K] decay, normalized k, operand-rounded k and q; [n] beta; [n][V] u.
  // Kept per thread and reused, like a caching allocator would, so the
  // baseline measures its passes over the state, not page faults.
  thread_local std::vector<float> decay, kn, kb, ks, qb, qs, beta, u;
  for (std::vector<float>* t : {&decay, &kn, &kb, &ks, &qb, &qs}) {
    t->resize(n * K);
  }
  beta.resize(n);
  u.resize(n * V);
  {
    HeadInputs<float> h;
    Operand op;
    for (int64_t bh = 0; bh < n; ++bh) {
      PrepareHead<float>(dims, in, math, bh / dims.heads,
                         static_cast<int>(bh % dims.heads), &h);
      std::copy(h.decay, h.decay + K, &decay[bh * K]);
      std::copy(h.kn, h.kn + K, &kn[bh * K]);
      MakeOperand(math.precision, h.kn, K, &op);
      std::copy(op.big, op.big + K, &kb[bh * K]);
      std::copy(op.small, op.small + K, &ks[bh * K]);
      MakeOperand(math.precision, h.qn, K, &op);
      std::copy(op.big, op.big + K, &qb[bh * K]);
      std::copy(op.small, op.small + K, &qs[bh * K]);
      beta[bh] = h.beta;
    }
  }
  // Pass 1: decay every state.
  for (int64_t bh = 0; bh < n; ++bh) {
    float* s = state + bh * kv;
    for (int i = 0; i < K; ++i) {
      const float d = decay[bh * K + i];
      for (int j = 0; j < V; ++j) s[i * V + j] *= d;
    }
  }
  // Pass 2: S^T k for every head, then u = beta * (v - S^T k).
  const NaiveDotFn dot = NaiveDotFor(math.precision);
  dot(n, K, V, state, kb.data(), ks.data(), u.data());
  for (int64_t bh = 0; bh < n; ++bh) {
    for (int j = 0; j < V; ++j) {
      u[bh * V + j] = beta[bh] * (in.v[bh * V + j] - u[bh * V + j]);
    }
  }
  // Pass 3: rank-1 update of every state.
  for (int64_t bh = 0; bh < n; ++bh) {
    float* s = state + bh * kv;
    const float* ub = u.data() + bh * V;
    for (int i = 0; i < K; ++i) {
      const float kk = kn[bh * K + i];
      for (int j = 0; j < V; ++j) s[i * V + j] = s[i * V + j] + kk * ub[j];
    }
  }
  // Pass 4: readout o = S^T q from the updated states.
  dot(n, K, V, state, qb.data(), qs.data(), out);
}

// ---------------------------------------------------------------------------

// The widest path DENSEGATE_KDA_SIMD allows kAuto to pick.
SimdPath EnvSimdCap() {
  const char* v = std::getenv("DENSEGATE_KDA_SIMD");
  if (v != nullptr && std::strcmp(v, "portable") == 0) {
    return SimdPath::kPortable;
  }
  if (v != nullptr && std::strcmp(v, "avx2") == 0) return SimdPath::kAvx2;
  return SimdPath::kAvx512;
}

}  // namespace

namespace internal {
void TiledHeadPortable(const HeadArgs& a) { PortableHeadFor(a.precision)(a); }
}  // namespace internal

absl::string_view KdaDecodeVariantName(KdaDecodeVariant v) {
  switch (v) {
    case KdaDecodeVariant::kNaive:
      return "naive";
    case KdaDecodeVariant::kFused:
      return "fused";
    case KdaDecodeVariant::kTiled:
      return "tiled";
  }
  return "unknown";
}

absl::StatusOr<KdaDecodeVariant> ParseKdaDecodeVariant(absl::string_view s) {
  for (KdaDecodeVariant v : {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
                             KdaDecodeVariant::kTiled}) {
    if (s == KdaDecodeVariantName(v)) return v;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown KDA decode variant \"%s\": expected naive, fused or tiled", s));
}

bool CpuHasAvx2Fma() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return internal::Avx2KernelCompiled() && __builtin_cpu_supports("avx2") &&
         __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool CpuHasAvx512() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  return internal::Avx512KernelCompiled() && CpuHasAvx2Fma() &&
         __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

SimdPath ResolvedAutoSimdPath() {
  const SimdPath cap = EnvSimdCap();
  if (cap == SimdPath::kAvx512 && CpuHasAvx512()) return SimdPath::kAvx512;
  if (cap != SimdPath::kPortable && CpuHasAvx2Fma()) return SimdPath::kAvx2;
  return SimdPath::kPortable;
}

absl::string_view SimdPathName(SimdPath p) {
  switch (p) {
    case SimdPath::kAuto:
      return "auto";
    case SimdPath::kPortable:
      return "portable";
    case SimdPath::kAvx2:
      return "avx2";
    case SimdPath::kAvx512:
      return "avx512";
  }
  return "unknown";
}

absl::Status KdaDecode(const KdaDims& dims, const KdaInputs<float>& in,
                       float* state, float* out,
                       const KdaDecodeOptions& options) {
  if (auto s = ValidateKdaInputs(dims, in, options.math.gate_mode, kWhat);
      !s.ok()) {
    return s;
  }
  if (state == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(
        "KDA decode: state and out must not be null");
  }
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KDA decode: num_threads must be >= 0 (0 = all hardware threads), "
        "got %d",
        options.num_threads));
  }
  const int64_t n = static_cast<int64_t>(dims.batch) * dims.heads;
  const KdaMath& math = options.math;
  switch (options.variant) {
    case KdaDecodeVariant::kNaive:
      DecodeNaive(dims, in, math, state, out);
      return absl::OkStatus();
    case KdaDecodeVariant::kFused:
    case KdaDecodeVariant::kTiled:
      break;
  }
  SimdPath path = options.simd;
  if (path == SimdPath::kAuto) path = ResolvedAutoSimdPath();
  if (path == SimdPath::kAvx2 && !CpuHasAvx2Fma()) {
    return absl::FailedPreconditionError(
        "KDA decode: SimdPath::kAvx2 requested but this CPU (or build) has "
        "no AVX2/FMA; use kAuto or kPortable");
  }
  if (path == SimdPath::kAvx512 && !CpuHasAvx512()) {
    return absl::FailedPreconditionError(
        "KDA decode: SimdPath::kAvx512 requested but this CPU (or build) has "
        "no AVX-512F (with AVX2/FMA); use kAuto, kAvx2 or kPortable");
  }
  if (options.variant == KdaDecodeVariant::kFused) {
    const HeadFn fn = path == SimdPath::kPortable
                          ? FusedHeadFor(math.precision)
                          : &internal::FusedHeadAvx2;
    for (int64_t bh = 0; bh < n; ++bh) {
      RunHead(dims, in, math, state, out, bh, bh + 1 < n ? bh + 1 : -1, fn);
    }
    return absl::OkStatus();
  }
  const HeadFn fn = path == SimdPath::kAvx512 ? &internal::TiledHeadAvx512
                    : path == SimdPath::kAvx2 ? &internal::TiledHeadAvx2
                                              : PortableHeadFor(math.precision);
  const int threads = options.num_threads == kAllThreads
                          ? ThreadPool::HardwareThreads()
                          : options.num_threads;
  // Threads take contiguous runs of heads (about 4 runs per thread, for
  // balance), so "the next head" is also the next one in memory.
  const int64_t run =
      threads <= 1 ? n : std::max<int64_t>(1, n / (int64_t{4} * threads));
  const int64_t runs = (n + run - 1) / run;
  auto body = [&](int64_t r) {
    const int64_t end = std::min(n, (r + 1) * run);
    for (int64_t bh = r * run; bh < end; ++bh) {
      RunHead(dims, in, math, state, out, bh, bh + 1 < end ? bh + 1 : -1, fn);
    }
  };
  if (threads <= 1 || runs <= 1) {
    for (int64_t r = 0; r < runs; ++r) body(r);
  } else {
    ThreadPool& pool =
        options.pool != nullptr ? *options.pool : ThreadPool::Shared();
    pool.ParallelFor(runs, threads, body);
  }
  return absl::OkStatus();
}

absl::Status KdaDecodeReference(const KdaDims& dims,
                                const KdaInputs<double>& in, double* state,
                                double* out, const KdaMath& math) {
  if (auto s =
          ValidateKdaInputs(dims, in, math.gate_mode, "KDA decode reference");
      !s.ok()) {
    return s;
  }
  if (state == nullptr || out == nullptr) {
    return absl::InvalidArgumentError(
        "KDA decode reference: state and out must not be null");
  }
  const int K = dims.k_dim;
  const int V = dims.v_dim;
  const int64_t n = static_cast<int64_t>(dims.batch) * dims.heads;
  HeadInputs<double> h;
  std::vector<double> u(V);
  for (int64_t bh = 0; bh < n; ++bh) {
    PrepareHead<double>(dims, in, math, bh / dims.heads,
                        static_cast<int>(bh % dims.heads), &h);
    double* s = state + bh * K * V;
    const double* v = in.v + bh * V;
    double* o = out + bh * V;
    // The recurrence, one step at a time, exactly in the documented order.
    for (int i = 0; i < K; ++i) {
      for (int j = 0; j < V; ++j) s[i * V + j] *= h.decay[i];
    }
    for (int j = 0; j < V; ++j) {
      double w = 0;
      for (int i = 0; i < K; ++i) w += s[i * V + j] * h.kn[i];
      u[j] = h.beta * (v[j] - w);
    }
    for (int i = 0; i < K; ++i) {
      for (int j = 0; j < V; ++j) s[i * V + j] += h.kn[i] * u[j];
    }
    for (int j = 0; j < V; ++j) {
      double acc = 0;
      for (int i = 0; i < K; ++i) acc += s[i * V + j] * h.qn[i];
      o[j] = acc;
    }
  }
  return absl::OkStatus();
}

}  // namespace densegate::kernels::kda
