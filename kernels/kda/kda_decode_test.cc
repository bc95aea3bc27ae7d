#include "kernels/kda/kda_decode.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/kda/kda_testing.h"
#include "kernels/kda/thread_pool.h"

namespace densegate::kernels::kda {
namespace {

using testing::CompareToReference;
using testing::ErrorStats;
using testing::FreshSeed;
using testing::KdaHostInputs;
using testing::MakeRandomInputs;
using testing::RandomVector;
using testing::Widen;

int64_t StateSize(const KdaDims& d) {
  return static_cast<int64_t>(d.batch) * d.heads * d.k_dim * d.v_dim;
}
int64_t OutSize(const KdaDims& d) {
  return static_cast<int64_t>(d.batch) * d.heads * d.v_dim;
}

std::vector<SimdPath> Paths() {
  std::vector<SimdPath> p = {SimdPath::kPortable};
  if (CpuHasAvx2Fma()) p.push_back(SimdPath::kAvx2);
  if (CpuHasAvx512()) p.push_back(SimdPath::kAvx512);
  return p;
}

struct RunResult {
  std::vector<float> out;    // Last step's output.
  std::vector<float> state;  // Final state.
  std::vector<double> ref_out;
  std::vector<double> ref_state;
  ErrorStats out_err;
  ErrorStats state_err;
};

// `steps` decode steps from a random non-zero state, fp32 kernel vs fp64
// reference on identical inputs.
RunResult RunAgainstReference(const KdaDims& dims,
                              const KdaDecodeOptions& options, int steps,
                              uint64_t seed,
                              const testing::RandomInputOptions& gen = {}) {
  RunResult r;
  r.state = RandomVector(StateSize(dims), seed, 0.2);
  r.ref_state = Widen(r.state);
  r.out.assign(OutSize(dims), NAN);
  r.ref_out.assign(OutSize(dims), NAN);
  for (int s = 0; s < steps; ++s) {
    const KdaHostInputs in = MakeRandomInputs(dims, seed + 1 + s, gen);
    const absl::Status st =
        KdaDecode(dims, in.F(), r.state.data(), r.out.data(), options);
    EXPECT_TRUE(st.ok()) << st;
    const absl::Status rs = KdaDecodeReference(dims, in.D(), r.ref_state.data(),
                                               r.ref_out.data(), options.math);
    EXPECT_TRUE(rs.ok()) << rs;
  }
  r.out_err = CompareToReference(r.out.data(), r.ref_out.data(), OutSize(dims));
  r.state_err =
      CompareToReference(r.state.data(), r.ref_state.data(), StateSize(dims));
  return r;
}

std::string Describe(const KdaDims& d, const KdaDecodeOptions& o) {
  return absl::StrFormat(
      "batch=%d heads=%d K=%d V=%d variant=%s prec=%s "
      "simd=%s threads=%d",
      d.batch, d.heads, d.k_dim, d.v_dim, KdaDecodeVariantName(o.variant),
      PrecisionName(o.math.precision), SimdPathName(o.simd), o.num_threads);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Shapes that are not multiples of any tile (8- or 16-lane vectors, 32- or
// 64-column blocks), plus the Kimi-Linear shape and the limits.
const KdaDims kShapes[] = {
    {2, 2, 128, 128}, {2, 2, 37, 53}, {1, 2, 64, 255}, {2, 1, 1, 9},
    {1, 1, 256, 256}, {3, 1, 19, 1},  {1, 3, 7, 100},
};

// The reference itself, on a case small enough to write out by hand:
// K = 2, V = 1, one head, zero eps.
TEST(KdaDecodeReferenceTest, MatchesHandComputedStep) {
  const KdaDims dims{1, 1, 2, 1};
  const double q[2] = {3, 4}, k[2] = {1, 0}, v[1] = {2}, g[2] = {-0.5, -1};
  const double beta[1] = {0.25};
  double S[2] = {1.0, -2.0};  // S[0][0], S[1][0]
  double o[1];
  KdaInputs<double> in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.g = g;
  in.beta = beta;
  KdaMath math;
  math.l2_eps = 0;
  ASSERT_TRUE(KdaDecodeReference(dims, in, S, o, math).ok());
  // q -> (0.6, 0.8) / sqrt(2); k -> (1, 0).
  const double s0 = 1.0 * std::exp(-0.5), s1 = -2.0 * std::exp(-1.0);
  const double u = 0.25 * (2 - s0);  // S^T k = s0.
  const double n0 = s0 + u, n1 = s1;
  EXPECT_NEAR(S[0], n0, 1e-15);
  EXPECT_NEAR(S[1], n1, 1e-15);
  EXPECT_NEAR(o[0], (0.6 * n0 + 0.8 * n1) / std::sqrt(2.0), 1e-15);
}

TEST(KdaDecodeTest, AllVariantsMatchReference) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const KdaDims& dims : kShapes) {
    for (KdaDecodeVariant v :
         {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
          KdaDecodeVariant::kTiled}) {
      for (SimdPath path : Paths()) {
        if (v == KdaDecodeVariant::kNaive && path != SimdPath::kPortable) {
          continue;  // The naive variant has no SIMD paths.
        }
        for (Precision p : {Precision::kIeee, Precision::kTf32x3}) {
          KdaDecodeOptions o;
          o.variant = v;
          o.simd = path;
          o.math.precision = p;
          SCOPED_TRACE(Describe(dims, o));
          const RunResult r = RunAgainstReference(dims, o, 4, seed);
          // fp32 class: ~1e-7 per step, a few steps.
          EXPECT_LT(r.out_err.rel_rms, 2e-6) << r.out_err.ToString();
          EXPECT_LT(r.out_err.max_rel_err, 2e-5) << r.out_err.ToString();
          EXPECT_LT(r.state_err.rel_rms, 2e-6) << r.state_err.ToString();
          EXPECT_LT(r.state_err.max_rel_err, 2e-5) << r.state_err.ToString();
        }
      }
    }
  }
}

// TF32 inputs pass a short-context tolerance (2e-3) yet are measurably
// (>= 10x) worse than ieee, which matches the reference at ~1e-7.
TEST(KdaDecodeTest, Tf32DiffersMeasurablyFromIeee) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{2, 2, 64, 64};
  for (SimdPath path : Paths()) {
    KdaDecodeOptions o;
    o.simd = path;
    o.math.precision = Precision::kIeee;
    const RunResult ieee = RunAgainstReference(dims, o, 8, seed);
    o.math.precision = Precision::kTf32;
    const RunResult tf32 = RunAgainstReference(dims, o, 8, seed);
    o.math.precision = Precision::kTf32Rna;
    const RunResult rna = RunAgainstReference(dims, o, 8, seed);
    SCOPED_TRACE(std::string(SimdPathName(path)));
    EXPECT_LT(ieee.out_err.rel_rms, 1e-6) << ieee.out_err.ToString();
    for (const RunResult* r : {&tf32, &rna}) {
      EXPECT_LT(r->out_err.rel_rms, 2e-3) << r->out_err.ToString();
      EXPECT_GT(r->out_err.rel_rms, 2e-5) << r->out_err.ToString();
      EXPECT_GT(r->out_err.rel_rms, 10 * ieee.out_err.rel_rms);
      EXPECT_GT(r->state_err.rel_rms, 10 * ieee.state_err.rel_rms);
    }
    // Round-to-nearest is more accurate than truncation on average.
    EXPECT_LT(rna.out_err.rel_rms, tf32.out_err.rel_rms);
  }
}

TEST(KdaDecodeTest, ErrorStaysFlatOverManySteps) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{1, 1, 32, 32};
  KdaDecodeOptions o;
  const RunResult r = RunAgainstReference(dims, o, 300, seed);
  EXPECT_LT(r.out_err.rel_rms, 2e-6) << r.out_err.ToString();
  EXPECT_LT(r.state_err.rel_rms, 2e-6) << r.state_err.ToString();
}

TEST(KdaDecodeTest, GatesFromRawInputsMatchReference) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{2, 3, 37, 53};
  testing::RandomInputOptions gen;
  gen.raw_gates = true;
  for (KdaDecodeVariant v : {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
                             KdaDecodeVariant::kTiled}) {
    KdaDecodeOptions o;
    o.variant = v;
    o.math.gate_mode = KdaGateMode::kFromRaw;
    SCOPED_TRACE(Describe(dims, o));
    const RunResult r = RunAgainstReference(dims, o, 3, seed, gen);
    EXPECT_LT(r.out_err.rel_rms, 2e-6) << r.out_err.ToString();
    EXPECT_LT(r.state_err.rel_rms, 2e-6) << r.state_err.ToString();
  }
  // The reference's raw-gate path equals precomputed gates written out here.
  const KdaHostInputs in = MakeRandomInputs(dims, seed, gen);
  std::vector<double> g(in.gd.size()), beta(in.betad.size());
  for (int64_t bh = 0; bh < dims.batch * dims.heads; ++bh) {
    const int h = static_cast<int>(bh % dims.heads);
    for (int i = 0; i < dims.k_dim; ++i) {
      const double x =
          in.gd[bh * dims.k_dim + i] + in.dt_biasd[h * dims.k_dim + i];
      g[bh * dims.k_dim + i] =
          -std::exp(in.a_logd[h]) * std::log1p(std::exp(x));
    }
    beta[bh] = 1 / (1 + std::exp(-in.betad[bh]));
  }
  KdaInputs<double> pre = in.D();
  pre.g = g.data();
  pre.beta = beta.data();
  std::vector<double> s1 = Widen(RandomVector(StateSize(dims), seed, 0.2));
  std::vector<double> s2 = s1, o1(OutSize(dims)), o2(OutSize(dims));
  KdaMath raw;
  raw.gate_mode = KdaGateMode::kFromRaw;
  ASSERT_TRUE(KdaDecodeReference(dims, in.D(), s1.data(), o1.data(), raw).ok());
  ASSERT_TRUE(KdaDecodeReference(dims, pre, s2.data(), o2.data(), {}).ok());
  EXPECT_LT(CompareToReference(o1.data(), o2.data(), OutSize(dims)).rel_rms,
            1e-13);
}

// In the TF32 modes every dot-product term is an exact fp32 product, so all
// variants and both SIMD paths must agree bit for bit.
TEST(KdaDecodeTest, VariantsAndPathsBitIdenticalInTf32Modes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const KdaDims& dims : {KdaDims{2, 2, 128, 128}, KdaDims{1, 3, 37, 53},
                              KdaDims{1, 1, 5, 255}}) {
    for (Precision p :
         {Precision::kTf32, Precision::kTf32Rna, Precision::kTf32x3}) {
      std::vector<float> first_out, first_state;
      for (KdaDecodeVariant v :
           {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
            KdaDecodeVariant::kTiled}) {
        for (SimdPath path : Paths()) {
          KdaDecodeOptions o;
          o.variant = v;
          o.simd = path;
          o.math.precision = p;
          SCOPED_TRACE(Describe(dims, o));
          const RunResult r = RunAgainstReference(dims, o, 3, seed);
          if (first_out.empty()) {
            first_out = r.out;
            first_state = r.state;
            continue;
          }
          EXPECT_TRUE(SameBits(r.out, first_out));
          EXPECT_TRUE(SameBits(r.state, first_state));
        }
      }
    }
  }
}

// The ieee AVX2 path uses FMA in the dot products, so it is not bitwise the
// portable one, but both are fp32-accurate and close to each other.
TEST(KdaDecodeTest, Avx2AndPortableAgreeInIeee) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{2, 2, 96, 77};
  KdaDecodeOptions o;
  o.simd = SimdPath::kPortable;
  const RunResult a = RunAgainstReference(dims, o, 3, seed);
  o.simd = SimdPath::kAvx2;
  const RunResult b = RunAgainstReference(dims, o, 3, seed);
  const ErrorStats d =
      CompareToReference(a.out.data(), b.out.data(), OutSize(dims));
  EXPECT_LT(d.rel_rms, 2e-6) << d.ToString();
  EXPECT_LT(a.out_err.rel_rms, 2e-6);
  EXPECT_LT(b.out_err.rel_rms, 2e-6);
}

// Runs `variant` on paths `a` and `b` in every precision mode from the same
// inputs and expects the same bits in outputs and final states.
void ExpectSameBitsOnBothPaths(const KdaDims& dims, KdaDecodeVariant variant,
                               SimdPath a, SimdPath b, uint64_t seed) {
  for (Precision p : {Precision::kIeee, Precision::kTf32, Precision::kTf32Rna,
                      Precision::kTf32x3}) {
    KdaDecodeOptions o;
    o.variant = variant;
    o.math.precision = p;
    o.simd = a;
    SCOPED_TRACE(Describe(dims, o));
    const RunResult ra = RunAgainstReference(dims, o, 3, seed);
    o.simd = b;
    const RunResult rb = RunAgainstReference(dims, o, 3, seed);
    EXPECT_TRUE(SameBits(ra.out, rb.out)) << SimdPathName(b);
    EXPECT_TRUE(SameBits(ra.state, rb.state)) << SimdPathName(b);
  }
}

// The fused kernel is one source compiled for both paths, without FMA
// contraction: the AVX2 build must give the portable build's bits in every
// precision mode, ieee included.
TEST(KdaDecodeTest, FusedPathsBitIdenticalInEveryMode) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  ExpectSameBitsOnBothPaths({2, 3, 37, 131}, KdaDecodeVariant::kFused,
                            SimdPath::kPortable, SimdPath::kAvx2, seed);
}

// The AVX-512 tiled kernel performs the AVX2 one's operations lane for lane:
// same bits in every mode, on widths that exercise every masked tail
// (1..16 lanes of the last vector, 1..4 vectors in the last block).
TEST(KdaDecodeTest, Avx512AndAvx2TiledBitIdenticalInEveryMode) {
  if (!CpuHasAvx512()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  for (const KdaDims& dims : {KdaDims{2, 3, 37, 131}, KdaDims{1, 2, 128, 128},
                              KdaDims{1, 2, 9, 1}, KdaDims{1, 1, 20, 47},
                              KdaDims{2, 1, 64, 256}, KdaDims{1, 1, 5, 112}}) {
    ExpectSameBitsOnBothPaths(dims, KdaDecodeVariant::kTiled, SimdPath::kAvx2,
                              SimdPath::kAvx512, seed);
  }
}

TEST(KdaDecodeTest, EnvironmentCapsTheAutoPath) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{1, 2, 40, 40};
  const SimdPath widest = CpuHasAvx512()    ? SimdPath::kAvx512
                          : CpuHasAvx2Fma() ? SimdPath::kAvx2
                                            : SimdPath::kPortable;
  EXPECT_EQ(ResolvedAutoSimdPath(), widest);
  ASSERT_EQ(setenv("DENSEGATE_KDA_SIMD", "avx2", 1), 0);
  EXPECT_EQ(ResolvedAutoSimdPath(),
            CpuHasAvx2Fma() ? SimdPath::kAvx2 : SimdPath::kPortable);
  KdaDecodeOptions o;
  o.simd = SimdPath::kAvx512;  // An explicit path ignores the cap.
  if (CpuHasAvx512()) {
    const RunResult r = RunAgainstReference(dims, o, 1, seed);
    EXPECT_LT(r.out_err.rel_rms, 2e-6);
  }
  ASSERT_EQ(unsetenv("DENSEGATE_KDA_SIMD"), 0);
  EXPECT_EQ(ResolvedAutoSimdPath(), widest);
}

TEST(KdaDecodeTest, EnvironmentForcesPortablePath) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{1, 2, 40, 40};
  KdaDecodeOptions o;
  o.simd = SimdPath::kPortable;
  const RunResult portable = RunAgainstReference(dims, o, 2, seed);
  ASSERT_EQ(setenv("DENSEGATE_KDA_SIMD", "portable", 1), 0);
  EXPECT_EQ(ResolvedAutoSimdPath(), SimdPath::kPortable);
  o.simd = SimdPath::kAuto;
  const RunResult forced = RunAgainstReference(dims, o, 2, seed);
  ASSERT_EQ(unsetenv("DENSEGATE_KDA_SIMD"), 0);
  EXPECT_TRUE(SameBits(portable.out, forced.out));
  EXPECT_TRUE(SameBits(portable.state, forced.state));
}

// Each (sequence, head) is computed identically whatever else is in the
// batch: a sequence decoded alone gives the same bits as inside a batch.
TEST(KdaDecodeTest, BatchInvariantBitForBit) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{5, 3, 37, 53};
  const KdaHostInputs in = MakeRandomInputs(dims, seed);
  const std::vector<float> s0 = RandomVector(StateSize(dims), seed + 7, 0.2);
  const int64_t hk = static_cast<int64_t>(dims.heads) * dims.k_dim;
  const int64_t hv = static_cast<int64_t>(dims.heads) * dims.v_dim;
  const int64_t hkv = hk * dims.v_dim;
  ThreadPool pool(3);
  for (KdaDecodeVariant v : {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
                             KdaDecodeVariant::kTiled}) {
    for (SimdPath path : Paths()) {
      for (Precision p : {Precision::kIeee, Precision::kTf32Rna}) {
        KdaDecodeOptions o;
        o.variant = v;
        o.simd = path;
        o.math.precision = p;
        o.num_threads = 4;
        o.pool = &pool;
        SCOPED_TRACE(Describe(dims, o));
        std::vector<float> batch_state = s0, batch_out(OutSize(dims));
        ASSERT_TRUE(
            KdaDecode(dims, in.F(), batch_state.data(), batch_out.data(), o)
                .ok());
        // Sequence b alone, from copies of its own slices.
        for (int b = 0; b < dims.batch; ++b) {
          const KdaDims one{1, dims.heads, dims.k_dim, dims.v_dim};
          std::vector<float> q(in.q.begin() + b * hk,
                               in.q.begin() + (b + 1) * hk);
          std::vector<float> k(in.k.begin() + b * hk,
                               in.k.begin() + (b + 1) * hk);
          std::vector<float> g(in.g.begin() + b * hk,
                               in.g.begin() + (b + 1) * hk);
          std::vector<float> vv(in.v.begin() + b * hv,
                                in.v.begin() + (b + 1) * hv);
          std::vector<float> beta(in.beta.begin() + b * dims.heads,
                                  in.beta.begin() + (b + 1) * dims.heads);
          std::vector<float> st(s0.begin() + b * hkv,
                                s0.begin() + (b + 1) * hkv);
          std::vector<float> out(hv);
          KdaInputs<float> one_in{q.data(), k.data(), vv.data(), g.data(),
                                  beta.data()};
          o.num_threads = 1;
          ASSERT_TRUE(KdaDecode(one, one_in, st.data(), out.data(), o).ok());
          o.num_threads = 4;
          EXPECT_EQ(std::memcmp(out.data(), batch_out.data() + b * hv,
                                hv * sizeof(float)),
                    0)
              << "sequence " << b;
          EXPECT_EQ(std::memcmp(st.data(), batch_state.data() + b * hkv,
                                hkv * sizeof(float)),
                    0)
              << "sequence " << b;
        }
      }
    }
  }
}

TEST(KdaDecodeTest, ThreadCountDoesNotChangeBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{3, 4, 64, 72};
  ThreadPool pool(5);
  for (SimdPath path : Paths()) {
    for (Precision p : {Precision::kIeee, Precision::kTf32}) {
      std::vector<float> ref_out, ref_state;
      for (int threads : {1, 2, 3, 6, kAllThreads}) {
        KdaDecodeOptions o;
        o.simd = path;
        o.math.precision = p;
        o.num_threads = threads;
        o.pool = threads == kAllThreads ? nullptr : &pool;
        SCOPED_TRACE(Describe(dims, o));
        const RunResult r = RunAgainstReference(dims, o, 3, seed);
        EXPECT_LT(r.out_err.rel_rms, p == Precision::kIeee ? 2e-6 : 2e-3);
        if (ref_out.empty()) {
          ref_out = r.out;
          ref_state = r.state;
        } else {
          EXPECT_TRUE(SameBits(r.out, ref_out));
          EXPECT_TRUE(SameBits(r.state, ref_state));
        }
      }
    }
  }
}

TEST(KdaDecodeTest, BadShapesAreClearErrors) {
  const KdaDims good{1, 1, 8, 8};
  const KdaHostInputs in = MakeRandomInputs(good, 1);
  std::vector<float> state(StateSize(good)), out(OutSize(good));
  struct Bad {
    KdaDims dims;
    const char* field;
  } bads[] = {
      {{1, 1, 257, 8}, "k_dim"}, {{1, 1, 0, 8}, "k_dim"},
      {{1, 1, 8, 0}, "v_dim"},   {{1, 1, 8, 300}, "v_dim"},
      {{0, 1, 8, 8}, "batch"},   {{1, 0, 8, 8}, "heads"},
      {{1, 1, -3, 8}, "k_dim"},
  };
  for (const Bad& b : bads) {
    for (KdaDecodeVariant v :
         {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
          KdaDecodeVariant::kTiled}) {
      KdaDecodeOptions o;
      o.variant = v;
      const absl::Status s =
          KdaDecode(b.dims, in.F(), state.data(), out.data(), o);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(s.message().find(b.field), absl::string_view::npos) << s;
      EXPECT_NE(s.message().find("[1, "), absl::string_view::npos) << s;
    }
    std::vector<double> ds(8 * 8), dout(8);
    const absl::Status r =
        KdaDecodeReference(b.dims, in.D(), ds.data(), dout.data(), {});
    EXPECT_EQ(r.code(), absl::StatusCode::kInvalidArgument) << r;
  }
  // Missing inputs and bad options.
  KdaInputs<float> missing = in.F();
  missing.v = nullptr;
  absl::Status s = KdaDecode(good, missing, state.data(), out.data(), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("v is null"), absl::string_view::npos) << s;
  KdaDecodeOptions raw;
  raw.math.gate_mode = KdaGateMode::kFromRaw;
  s = KdaDecode(good, in.F(), state.data(), out.data(), raw);
  EXPECT_NE(s.message().find("a_log"), absl::string_view::npos) << s;
  s = KdaDecode(good, in.F(), nullptr, out.data(), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  KdaDecodeOptions neg;
  neg.num_threads = -1;
  s = KdaDecode(good, in.F(), state.data(), out.data(), neg);
  EXPECT_NE(s.message().find("num_threads"), absl::string_view::npos) << s;
  if (!CpuHasAvx2Fma()) {
    KdaDecodeOptions avx;
    avx.simd = SimdPath::kAvx2;
    s = KdaDecode(good, in.F(), state.data(), out.data(), avx);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  }
  if (!CpuHasAvx512()) {
    KdaDecodeOptions avx512;
    avx512.simd = SimdPath::kAvx512;
    s = KdaDecode(good, in.F(), state.data(), out.data(), avx512);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("AVX-512"), absl::string_view::npos) << s;
  }
}

TEST(KdaDecodeTest, VariantNamesRoundTrip) {
  for (KdaDecodeVariant v : {KdaDecodeVariant::kNaive, KdaDecodeVariant::kFused,
                             KdaDecodeVariant::kTiled}) {
    auto p = ParseKdaDecodeVariant(KdaDecodeVariantName(v));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, v);
  }
  EXPECT_FALSE(ParseKdaDecodeVariant("fast").ok());
}

}  // namespace
}  // namespace densegate::kernels::kda
