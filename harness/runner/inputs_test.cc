#include "harness/runner/inputs.h"

#include <cmath>

#include "gtest/gtest.h"

namespace densegate::harness {
namespace {

RunnerLayout Layout(const nlohmann::json& buffers) {
  auto layout = LayoutFromDescription("op", nlohmann::json::object(), nlohmann::json::object(),
                                      {{"buffers", buffers}});
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

TEST(LayoutTest, OffsetsAreAlignedAndResultsFollowInFp64) {
  RunnerLayout l = Layout({{{"name", "x"}, {"role", "input"}, {"count", 3}, {"init", {{"dist", "normal"}}}},
                           {{"name", "s"}, {"role", "inout"}, {"count", 5}, {"init", {{"dist", "normal"}}}},
                           {{"name", "y"}, {"role", "output"}, {"count", 17}}});
  ASSERT_EQ(l.buffers.size(), 3u);
  EXPECT_EQ(l.buffers[0].offset, 0);
  EXPECT_EQ(l.buffers[1].offset, 64);
  EXPECT_EQ(l.buffers[2].offset, 128);
  EXPECT_EQ(l.compute_bytes, 256);  // 17 floats round up to 128 bytes.
  EXPECT_EQ(l.buffers[0].result_offset, -1);
  EXPECT_EQ(l.buffers[1].result_offset, 256);
  EXPECT_EQ(l.buffers[2].result_offset, 320);
  EXPECT_EQ(l.reference_bytes, 320 + 192);
}

TEST(LayoutTest, BadDescriptionsAreRejected) {
  auto no_buffers = LayoutFromDescription("op", {}, {}, {{"ok", true}});
  EXPECT_FALSE(no_buffers.ok());
  auto bad_role = LayoutFromDescription(
      "op", {}, {}, {{"buffers", {{{"name", "x"}, {"role", "scratch"}, {"count", 1}}}}});
  EXPECT_NE(bad_role.status().message().find("scratch"), std::string::npos);
  auto no_output = LayoutFromDescription(
      "op", {}, {}, {{"buffers", {{{"name", "x"}, {"role", "input"}, {"count", 1}}}}});
  EXPECT_NE(no_output.status().message().find("no outputs"), std::string::npos);
}

TEST(DrawInputsTest, DistributionsHaveTheirShapeAndSeedsDiffer) {
  RunnerLayout l = Layout(
      {{{"name", "n"}, {"role", "input"}, {"count", 100001}, {"init", {{"dist", "normal"}, {"scale", 2.0}}}},
       {{"name", "g"}, {"role", "input"}, {"count", 1000}, {"init", {{"dist", "log_decay"}, {"gate_scale", 10.0}}}},
       {{"name", "b"}, {"role", "input"}, {"count", 1000}, {"init", {{"dist", "sigmoid_normal"}}}},
       {{"name", "u"}, {"role", "input"}, {"count", 1000}, {"init", {{"dist", "uniform"}, {"lo", -1}, {"hi", 3}}}},
       {{"name", "y"}, {"role", "output"}, {"count", 4}}});
  std::vector<std::vector<float>> v, w;
  ASSERT_TRUE(DrawInputs(l, 1, &v).ok());
  ASSERT_TRUE(DrawInputs(l, 2, &w).ok());
  EXPECT_NE(v[0], w[0]);
  double mean = 0, sq = 0;
  for (float x : v[0]) mean += x, sq += double(x) * x;
  mean /= v[0].size();
  const double sd = std::sqrt(sq / v[0].size() - mean * mean);
  EXPECT_NEAR(mean, 0, 0.03);
  EXPECT_NEAR(sd, 2.0, 0.03);
  for (float x : v[1]) EXPECT_TRUE(x < 0 && x > -2) << x;
  for (float x : v[2]) EXPECT_TRUE(x > 0 && x < 1) << x;
  for (float x : v[3]) EXPECT_TRUE(x > -1 && x < 3) << x;
  EXPECT_TRUE(v[4].empty());
  RunnerLayout bad = Layout({{{"name", "x"}, {"role", "input"}, {"count", 1}, {"init", {{"dist", "zeros"}}}},
                             {{"name", "y"}, {"role", "output"}, {"count", 1}}});
  EXPECT_FALSE(DrawInputs(bad, 1, &v).ok());
}

}  // namespace
}  // namespace densegate::harness
