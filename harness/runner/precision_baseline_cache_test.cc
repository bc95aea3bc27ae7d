#include "harness/runner/precision_baseline_cache.h"

#include "gtest/gtest.h"

namespace densegate::harness {
namespace {

// An entry of `floats` fp32 inputs and `doubles` reference values.
std::shared_ptr<const PrecisionBaseline> Baseline(size_t floats, size_t doubles) {
  auto b = std::make_shared<PrecisionBaseline>();
  b->inputs = {std::vector<float>(floats, 1.0f), {}};
  b->reference.assign(doubles, 2.0);
  return b;
}

v1::PrecisionSuite Suite() {
  v1::PrecisionSuite s;
  s.set_name("decode");
  s.set_op("kda_decode");
  s.set_runner("bazel-bin/runner");
  for (int64_t len : {1024, 4096}) s.add_lengths(len);
  (*s.mutable_params())["gate_scale"] = 1000;
  (*s.mutable_shape())["k"] = 64;
  return s;
}

TEST(PrecisionBaselineTest, BytesCountInputsAndReference) {
  EXPECT_EQ(Baseline(10, 3)->Bytes(), 10 * 4 + 3 * 8);
}

TEST(PrecisionBaselineKeyTest, WhatTheBaselineHalfDependsOnChangesTheKey) {
  const std::string key = PrecisionBaselineKey("d1", Suite());
  EXPECT_EQ(PrecisionBaselineKey("d1", Suite()), key);
  EXPECT_NE(PrecisionBaselineKey("d2", Suite()), key);
  v1::PrecisionSuite longer = Suite();
  longer.add_lengths(16384);
  EXPECT_NE(PrecisionBaselineKey("d1", longer), key);
  v1::PrecisionSuite slower = Suite();
  (*slower.mutable_params())["gate_scale"] = 1000.5;
  EXPECT_NE(PrecisionBaselineKey("d1", slower), key);
  v1::PrecisionSuite wider = Suite();
  (*wider.mutable_shape())["k"] = 128;
  EXPECT_NE(PrecisionBaselineKey("d1", wider), key);
  v1::PrecisionSuite prefill = Suite();
  prefill.set_op("kda_prefill");
  EXPECT_NE(PrecisionBaselineKey("d1", prefill), key);
  // The bounds judge the candidate; the baseline's half does not use them.
  v1::PrecisionSuite stricter = Suite();
  stricter.set_max_rel_rms(1e-6);
  stricter.set_name("renamed");
  EXPECT_EQ(PrecisionBaselineKey("d1", stricter), key);
}

TEST(PrecisionBaselineCacheTest, FindsWhatWasInserted) {
  PrecisionBaselineCache cache(1 << 20);
  EXPECT_EQ(cache.Find("a"), nullptr);
  auto a = Baseline(100, 10);
  cache.Insert("a", a);
  EXPECT_EQ(cache.Find("a"), a);
  EXPECT_EQ(cache.Find("b"), nullptr);
  EXPECT_EQ(cache.bytes(), a->Bytes());
}

TEST(PrecisionBaselineCacheTest, DropsTheLeastRecentlyUsedBeyondTheBudget) {
  // Room for two entries of 480 bytes.
  PrecisionBaselineCache cache(1000);
  cache.Insert("a", Baseline(100, 10));
  cache.Insert("b", Baseline(100, 10));
  ASSERT_NE(cache.Find("a"), nullptr);  // "b" is now the least recently used.
  cache.Insert("c", Baseline(100, 10));
  EXPECT_NE(cache.Find("a"), nullptr);
  EXPECT_EQ(cache.Find("b"), nullptr);
  EXPECT_NE(cache.Find("c"), nullptr);
  EXPECT_EQ(cache.entries(), 2);
  EXPECT_EQ(cache.bytes(), 960);
}

TEST(PrecisionBaselineCacheTest, ReplacesAnEntryUnderTheSameKey) {
  PrecisionBaselineCache cache(1000);
  cache.Insert("a", Baseline(100, 10));
  auto bigger = Baseline(200, 10);
  cache.Insert("a", bigger);
  EXPECT_EQ(cache.Find("a"), bigger);
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), bigger->Bytes());
}

TEST(PrecisionBaselineCacheTest, KeepsNothingLargerThanItsBudget) {
  PrecisionBaselineCache cache(1000);
  cache.Insert("a", Baseline(100, 10));
  cache.Insert("huge", Baseline(1000, 0));
  EXPECT_EQ(cache.Find("huge"), nullptr);
  EXPECT_NE(cache.Find("a"), nullptr);
  PrecisionBaselineCache off(0);
  off.Insert("a", Baseline(1, 0));
  EXPECT_EQ(off.Find("a"), nullptr);
  EXPECT_EQ(off.bytes(), 0);
}

}  // namespace
}  // namespace densegate::harness
