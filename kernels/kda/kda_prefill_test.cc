#include "kernels/kda/kda_prefill.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "kernels/kda/kda_decode.h"
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
  return static_cast<int64_t>(d.heads) * d.k_dim * d.v_dim;
}
int64_t OutSize(const KdaDims& d) {
  return static_cast<int64_t>(d.batch) * d.heads * d.v_dim;
}

struct PrefillResult {
  std::vector<float> out, state;
  std::vector<double> ref_out, ref_state;
  ErrorStats out_err, state_err;
};

// fp32 prefill vs the fp64 token-by-token recurrence, from a random state.
PrefillResult RunPrefill(const KdaDims& dims, const KdaPrefillOptions& o,
                         uint64_t seed,
                         const testing::RandomInputOptions& gen = {}) {
  const KdaHostInputs in = MakeRandomInputs(dims, seed, gen);
  PrefillResult r;
  r.state = RandomVector(StateSize(dims), seed + 1, 0.2);
  r.ref_state = Widen(r.state);
  r.out.assign(OutSize(dims), NAN);
  r.ref_out.assign(OutSize(dims), NAN);
  absl::Status s = KdaPrefill(dims, in.F(), r.state.data(), r.out.data(), o);
  EXPECT_TRUE(s.ok()) << s;
  s = KdaRecurrenceReference(dims, in.D(), r.ref_state.data(), r.ref_out.data(),
                             o.math);
  EXPECT_TRUE(s.ok()) << s;
  r.out_err = CompareToReference(r.out.data(), r.ref_out.data(), OutSize(dims));
  r.state_err =
      CompareToReference(r.state.data(), r.ref_state.data(), StateSize(dims));
  return r;
}

std::string Describe(const KdaDims& d, const KdaPrefillOptions& o) {
  return absl::StrFormat("T=%d heads=%d K=%d V=%d variant=%s chunk=%d prec=%s",
                         d.batch, d.heads, d.k_dim, d.v_dim,
                         KdaPrefillVariantName(o.variant), o.chunk_size,
                         PrecisionName(o.math.precision));
}

TEST(KdaPrefillTest, ChunkedMatchesRecurrenceIncludingTails) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims shapes[] = {{1, 2, 40, 24},    {17, 2, 40, 24}, {63, 1, 37, 53},
                            {64, 1, 37, 53},   {65, 2, 16, 8},  {130, 1, 1, 5},
                            {200, 1, 128, 128}};
  for (const KdaDims& dims : shapes) {
    for (KdaPrefillVariant v :
         {KdaPrefillVariant::kChunked, KdaPrefillVariant::kRecurrent}) {
      for (Precision p : {Precision::kIeee, Precision::kTf32x3}) {
        KdaPrefillOptions o;
        o.variant = v;
        o.math.precision = p;
        SCOPED_TRACE(Describe(dims, o));
        const PrefillResult r = RunPrefill(dims, o, seed);
        EXPECT_LT(r.out_err.rel_rms, 3e-6) << r.out_err.ToString();
        EXPECT_LT(r.out_err.max_rel_err, 5e-5) << r.out_err.ToString();
        EXPECT_LT(r.state_err.rel_rms, 3e-6) << r.state_err.ToString();
        EXPECT_LT(r.state_err.max_rel_err, 5e-5) << r.state_err.ToString();
      }
    }
  }
}

// In fp64 the chunked algebra (either cumulative-sum form, any chunk size)
// equals the recurrence to rounding: this checks the algorithm itself.
TEST(KdaPrefillTest, Fp64ChunkedEqualsFp64Recurrence) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{150, 2, 33, 21};
  const KdaHostInputs in = MakeRandomInputs(dims, seed);
  const std::vector<double> s0 =
      Widen(RandomVector(StateSize(dims), seed + 1, 0.2));
  std::vector<double> ref_state = s0, ref_out(OutSize(dims));
  ASSERT_TRUE(
      KdaRecurrenceReference(dims, in.D(), ref_state.data(), ref_out.data(), {})
          .ok());
  for (KdaPrefillVariant v :
       {KdaPrefillVariant::kChunked, KdaPrefillVariant::kGlobalCumsum}) {
    for (int chunk : {1, 7, 16, 64, 256}) {
      KdaPrefillOptions o;
      o.variant = v;
      o.chunk_size = chunk;
      SCOPED_TRACE(Describe(dims, o));
      std::vector<double> st = s0, out(OutSize(dims));
      ASSERT_TRUE(KdaPrefillFp64(dims, in.D(), st.data(), out.data(), o).ok());
      EXPECT_LT(
          CompareToReference(out.data(), ref_out.data(), out.size()).rel_rms,
          1e-12);
      EXPECT_LT(
          CompareToReference(st.data(), ref_state.data(), st.size()).rel_rms,
          1e-12);
    }
  }
}

// Strong decay makes the global cumulative sum large; its fp32 differences
// then lose bits, while the per-chunk form stays at fp32 accuracy.
TEST(KdaPrefillTest, GlobalCumsumLosesPrecisionWithLength) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  testing::RandomInputOptions gen;
  gen.gate_scale = 1.0;  // g ~ logsigmoid(randn): |cumsum| ~ 0.8 per token.
  KdaPrefillOptions chunked, global;
  global.variant = KdaPrefillVariant::kGlobalCumsum;
  const KdaDims short_dims{64, 1, 16, 16};
  const PrefillResult cs = RunPrefill(short_dims, chunked, seed, gen);
  const PrefillResult gs = RunPrefill(short_dims, global, seed, gen);
  // One chunk: both forms are the same computation.
  EXPECT_LT(gs.out_err.rel_rms, 3e-6) << gs.out_err.ToString();
  EXPECT_LT(cs.out_err.rel_rms, 3e-6) << cs.out_err.ToString();
  const KdaDims long_dims{2048, 1, 16, 16};
  const PrefillResult cl = RunPrefill(long_dims, chunked, seed, gen);
  const PrefillResult gl = RunPrefill(long_dims, global, seed, gen);
  EXPECT_LT(cl.out_err.rel_rms, 3e-6) << cl.out_err.ToString();
  EXPECT_GT(gl.out_err.rel_rms, 10 * cl.out_err.rel_rms)
      << "global " << gl.out_err.ToString() << " chunked "
      << cl.out_err.ToString();
}

// Prefill hands its state to decode: prefill(T1) + decode(T2) equals one
// recurrence over T1 + T2 tokens.
TEST(KdaPrefillTest, PrefillThenDecodeEqualsOneLongRecurrence) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const int t1 = 100, t2 = 20, heads = 3, K = 48, V = 40;
  const KdaDims all{t1 + t2, heads, K, V};
  const KdaHostInputs in = MakeRandomInputs(all, seed);
  std::vector<double> ref_state(StateSize(all), 0.0), ref_out(OutSize(all));
  ASSERT_TRUE(
      KdaRecurrenceReference(all, in.D(), ref_state.data(), ref_out.data(), {})
          .ok());
  for (Precision p : {Precision::kIeee, Precision::kTf32x3}) {
    SCOPED_TRACE(std::string(PrecisionName(p)));
    std::vector<float> state(StateSize(all), 0.0f), out(OutSize(all), NAN);
    KdaPrefillOptions po;
    po.math.precision = p;
    const KdaDims pre{t1, heads, K, V};
    ASSERT_TRUE(KdaPrefill(pre, in.F(), state.data(), out.data(), po).ok());
    KdaDecodeOptions dopt;
    dopt.math.precision = p;
    const KdaDims step{1, heads, K, V};
    for (int t = t1; t < t1 + t2; ++t) {
      KdaInputs<float> x = in.F();
      x.q += static_cast<int64_t>(t) * heads * K;
      x.k += static_cast<int64_t>(t) * heads * K;
      x.g += static_cast<int64_t>(t) * heads * K;
      x.v += static_cast<int64_t>(t) * heads * V;
      x.beta += t * heads;
      ASSERT_TRUE(KdaDecode(step, x, state.data(),
                            out.data() + static_cast<int64_t>(t) * heads * V,
                            dopt)
                      .ok());
    }
    const ErrorStats e =
        CompareToReference(out.data(), ref_out.data(), out.size());
    const ErrorStats se =
        CompareToReference(state.data(), ref_state.data(), state.size());
    EXPECT_LT(e.rel_rms, 3e-6) << e.ToString();
    EXPECT_LT(e.max_rel_err, 5e-5) << e.ToString();
    EXPECT_LT(se.rel_rms, 3e-6) << se.ToString();
  }
}

TEST(KdaPrefillTest, Tf32DiffersMeasurablyFromIeee) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{96, 2, 32, 32};
  KdaPrefillOptions o;
  const PrefillResult ieee = RunPrefill(dims, o, seed);
  o.math.precision = Precision::kTf32;
  const PrefillResult tf32 = RunPrefill(dims, o, seed);
  EXPECT_LT(ieee.out_err.rel_rms, 2e-6) << ieee.out_err.ToString();
  EXPECT_LT(tf32.out_err.rel_rms, 5e-3) << tf32.out_err.ToString();
  EXPECT_GT(tf32.out_err.rel_rms, 10 * ieee.out_err.rel_rms)
      << tf32.out_err.ToString();
}

TEST(KdaPrefillTest, GatesFromRawInputs) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  testing::RandomInputOptions gen;
  gen.raw_gates = true;
  KdaPrefillOptions o;
  o.math.gate_mode = KdaGateMode::kFromRaw;
  const PrefillResult r = RunPrefill({90, 2, 24, 20}, o, seed, gen);
  EXPECT_LT(r.out_err.rel_rms, 3e-6) << r.out_err.ToString();
  EXPECT_LT(r.state_err.rel_rms, 3e-6) << r.state_err.ToString();
}

TEST(KdaPrefillTest, ThreadCountDoesNotChangeBits) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const KdaDims dims{70, 5, 20, 12};
  const KdaHostInputs in = MakeRandomInputs(dims, seed);
  const std::vector<float> s0 = RandomVector(StateSize(dims), seed, 0.2);
  ThreadPool pool(3);
  std::vector<float> out1, st1;
  for (int threads : {1, 2, 4, kAllThreads}) {
    KdaPrefillOptions o;
    o.num_threads = threads;
    o.pool = threads == kAllThreads ? nullptr : &pool;
    std::vector<float> st = s0, out(OutSize(dims));
    ASSERT_TRUE(KdaPrefill(dims, in.F(), st.data(), out.data(), o).ok());
    if (out1.empty()) {
      out1 = out;
      st1 = st;
    } else {
      EXPECT_EQ(std::memcmp(out.data(), out1.data(), out.size() * 4), 0);
      EXPECT_EQ(std::memcmp(st.data(), st1.data(), st.size() * 4), 0);
    }
  }
}

TEST(KdaPrefillTest, BadArgumentsAreClearErrors) {
  const KdaDims good{8, 1, 8, 8};
  const KdaHostInputs in = MakeRandomInputs(good, 1);
  std::vector<float> st(StateSize(good)), out(OutSize(good));
  KdaPrefillOptions o;
  absl::Status s = KdaPrefill({0, 1, 8, 8}, in.F(), st.data(), out.data(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("batch"), absl::string_view::npos) << s;
  s = KdaPrefill({8, 1, 300, 8}, in.F(), st.data(), out.data(), o);
  EXPECT_NE(s.message().find("k_dim"), absl::string_view::npos) << s;
  s = KdaPrefill({8, 1, 8, 0}, in.F(), st.data(), out.data(), o);
  EXPECT_NE(s.message().find("v_dim"), absl::string_view::npos) << s;
  for (int chunk : {0, -1, kKdaMaxChunk + 1}) {
    o.chunk_size = chunk;
    s = KdaPrefill(good, in.F(), st.data(), out.data(), o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("chunk_size"), absl::string_view::npos) << s;
  }
  o.chunk_size = 64;
  s = KdaPrefill(good, in.F(), nullptr, out.data(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  std::vector<double> dst(StateSize(good)), dout(OutSize(good));
  s = KdaPrefillFp64({8, 1, 8, 257}, in.D(), dst.data(), dout.data(), o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseKdaPrefillVariant("chunky").ok());
  EXPECT_EQ(*ParseKdaPrefillVariant("global_cumsum"),
            KdaPrefillVariant::kGlobalCumsum);
}

}  // namespace
}  // namespace densegate::kernels::kda
