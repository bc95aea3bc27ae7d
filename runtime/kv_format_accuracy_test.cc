// Accuracy of each quantized KV-cache format against the fp32 cache on the
// tiny model: the logits' error and how often the top-1 token agrees, over
// a fixed set of prompts. The quantized run is teacher-forced with the fp32
// run's tokens, so every position compares the same context.
//
// Measured (tiny config, 64 prompts of 16..111 tokens, 48 positions each,
// 3072 positions per format); the logit-error bounds below are about 2x
// these, the agreement bounds what the issue asks (>= 99% for bf16 and
// fp8_e4m3) or what was measured minus ~0.5%:
//   format     rel_rms(logits)   max_rel    top-1 agreement
//   bf16       2.9e-4            6.6e-4     99.93%
//   fp8_e4m3   4.7e-3            1.5e-2     99.51%
//   fp8_e5m2   9.3e-3            2.8e-2     98.86%
//   int8       9.0e-4            2.0e-3     99.87%  (fp32 scales)
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtime/hybrid_model.h"
#include "runtime/test_util.h"

namespace densegate::runtime {
namespace {

using kernels::KvFormat;

struct Accuracy {
  double rel_rms = 0;    // RMS(logits - ref) / RMS(ref), over everything.
  double max_rel = 0;    // max |logit - ref| / max |ref|.
  double agreement = 0;  // Fraction of positions with the same argmax.
  int positions = 0;
};

constexpr int kPrompts = 64;
constexpr int kNew = 48;

std::vector<int32_t> Prompt(int p, int vocab) {
  return testing::RandomPrompt(16 + (p * 13) % 96, 1000 + p, vocab);
}

// The fp32 runs, shared by every format's test.
const std::vector<testing::Generation>& Reference(const HybridModel& model) {
  static const auto* ref = [&] {
    auto* out = new std::vector<testing::Generation>;
    for (int p = 0; p < kPrompts; ++p) {
      absl::StatusOr<testing::Generation> g = testing::GenerateAlone(
          model, Prompt(p, model.config().vocab_size), kNew, KvFormat::kFp32);
      EXPECT_TRUE(g.ok()) << g.status();
      out->push_back(std::move(*g));
    }
    return out;
  }();
  return *ref;
}

Accuracy Measure(const HybridModel& model, KvFormat format) {
  const int vocab = model.config().vocab_size;
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  int agree = 0, positions = 0;
  for (int p = 0; p < kPrompts; ++p) {
    const testing::Generation& ref = Reference(model)[p];
    absl::StatusOr<testing::Generation> q =
        testing::GenerateAlone(model, Prompt(p, vocab), kNew, format,
                               4 * kPrefillAlignment, &ref.tokens);
    EXPECT_TRUE(q.ok()) << q.status();
    for (int i = 0; i < kNew; ++i) {
      const std::vector<float>& a = q->logits[i];
      const std::vector<float>& b = ref.logits[i];
      for (int j = 0; j < vocab; ++j) {
        err2 += (a[j] - b[j]) * double(a[j] - b[j]);
        ref2 += b[j] * double(b[j]);
        max_err = std::max(max_err, std::abs(double(a[j]) - b[j]));
        max_ref = std::max(max_ref, std::abs(double(b[j])));
      }
      agree += q->tokens[i] == ref.tokens[i];
      ++positions;
    }
  }
  return {std::sqrt(err2 / ref2), max_err / max_ref,
          static_cast<double>(agree) / positions, positions};
}

struct Expectation {
  KvFormat format;
  double max_rel_rms;
  double min_agreement;
};

class KvFormatAccuracyTest : public ::testing::TestWithParam<Expectation> {
 protected:
  static void SetUpTestSuite() { model_ = testing::TinyModel().release(); }
  static void TearDownTestSuite() { delete model_; }
  static const HybridModel* model_;
};
const HybridModel* KvFormatAccuracyTest::model_ = nullptr;

TEST_P(KvFormatAccuracyTest, LogitErrorAndTop1AgreementWithinBounds) {
  const Expectation& e = GetParam();
  const Accuracy a = Measure(*model_, e.format);
  const std::string name(kernels::KvFormatName(e.format));
  std::printf(
      "kv_format=%s positions=%d rel_rms=%.3e max_rel=%.3e "
      "top1_agreement=%.4f\n",
      name.c_str(), a.positions, a.rel_rms, a.max_rel, a.agreement);
  RecordProperty("rel_rms", absl::StrFormat("%.3e", a.rel_rms));
  RecordProperty("top1_agreement", absl::StrFormat("%.4f", a.agreement));
  EXPECT_LE(a.rel_rms, e.max_rel_rms) << name;
  EXPECT_GE(a.agreement, e.min_agreement) << name;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, KvFormatAccuracyTest,
    ::testing::Values(Expectation{KvFormat::kFp32, 0.0, 1.0},
                      Expectation{KvFormat::kBf16, 6e-4, 0.99},
                      Expectation{KvFormat::kFp8E4M3, 1e-2, 0.99},
                      Expectation{KvFormat::kFp8E5M2, 2e-2, 0.98},
                      Expectation{KvFormat::kInt8, 2e-3, 0.99}),
    [](const ::testing::TestParamInfo<Expectation>& info) {
      return std::string(kernels::KvFormatName(info.param.format));
    });

}  // namespace
}  // namespace densegate::runtime
