#include "kernels/runner/runner_ops.h"

#include <cmath>
#include <cstring>
#include <random>

#include "gtest/gtest.h"

namespace densegate::kernels::runner {
namespace {

using nlohmann::json;

struct Arrays {
  std::vector<std::vector<float>> f32;
  std::vector<std::vector<double>> f64;
  std::vector<float*> buffers;
  std::vector<double*> results;
};

Arrays Allocate(const std::vector<BufferSpec>& specs, uint64_t seed) {
  Arrays a;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  for (const BufferSpec& b : specs) {
    std::vector<float> v(b.count);
    for (float& x : v) {
      if (b.name == "g") {
        x = -std::log1p(std::exp(-normal(rng))) / 10.0f;  // logsigmoid / 10.
      } else if (b.name == "beta") {
        x = 1.0f / (1.0f + std::exp(-normal(rng)));
      } else {
        x = b.role == Role::kOutput ? NAN : normal(rng) * (b.name == "state" ? 0.1f : 1.0f);
      }
    }
    a.f32.push_back(std::move(v));
    if (b.role != Role::kInput) a.f64.emplace_back(b.count);
  }
  for (auto& v : a.f32) a.buffers.push_back(v.data());
  for (auto& v : a.f64) a.results.push_back(v.data());
  return a;
}

// Bytewise: the outputs hold NaN poison, which never compares equal.
bool SameBytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

double RelRms(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(RunnerOpsTest, ComputeMatchesReferenceForEveryOp) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  const json none = json::object();
  struct Case {
    std::string op;
    json shape;
    double bound;
    json params = json::object();
  };
  const json decode = {{"batch", 2}, {"heads", 3}, {"k", 37}, {"v", 53}, {"steps", 4}};
  for (const Case& c : std::vector<Case>{
           {"kda_decode", decode, 1e-5},
           {"kda_decode", decode, 1e-5, {{"variant", "naive"}}},
           {"kda_decode", decode, 1e-5, {{"variant", "fused"}}},
           {"kda_decode", decode, 1e-5, {{"variant", "tiled"}}},
           // A precision sweep's form: one sequence of `tokens` steps.
           {"kda_decode", {{"tokens", 6}, {"heads", 2}, {"k", 16}, {"v", 8}}, 1e-5},
           {"kda_prefill", {{"tokens", 70}, {"heads", 2}, {"k", 32}, {"v", 16}}, 1e-5},
           {"quantize_bf16", {{"tokens", 5}, {"heads", 3}, {"dim", 33}}, 0},
           {"quantize_fp8_e4m3", {{"tokens", 5}, {"heads", 3}, {"dim", 33}}, 0},
           {"quantize_fp8_e5m2", {{"tokens", 5}, {"heads", 3}, {"dim", 33}}, 0},
           {"quantize_int8", {{"tokens", 5}, {"heads", 3}, {"dim", 33}}, 0}}) {
    SCOPED_TRACE(c.op + " " + c.params.dump());
    auto specs = DescribeOp(c.op, c.shape, c.params);
    ASSERT_TRUE(specs.ok()) << specs.status();
    Arrays a = Allocate(*specs, seed);
    const std::vector<std::vector<float>> inputs = a.f32;
    ASSERT_TRUE(RunOp(c.op, c.shape, c.params, /*reference=*/true, a.buffers, a.results).ok());
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_TRUE(SameBytes(a.f32[i], inputs[i])) << "reference mode wrote " << (*specs)[i].name;
    }
    ASSERT_TRUE(RunOp(c.op, c.shape, c.params, /*reference=*/false, a.buffers, {}).ok());
    size_t r = 0;
    for (size_t i = 0; i < specs->size(); ++i) {
      if ((*specs)[i].role == Role::kInput) {
        EXPECT_TRUE(SameBytes(a.f32[i], inputs[i])) << (*specs)[i].name << " was modified";
        continue;
      }
      const double err = RelRms(a.f32[i], a.f64[r++]);
      EXPECT_LE(err, c.bound) << (*specs)[i].name;
      EXPECT_TRUE(std::isfinite(err)) << (*specs)[i].name;
    }
  }
}

TEST(RunnerOpsTest, BadRequestsNameTheProblem) {
  const json none = json::object();
  auto s = DescribeOp("kda_encode", none, none);
  EXPECT_NE(s.status().message().find("unknown op"), std::string::npos);
  s = DescribeOp("kda_decode", json{{"batch", 1}, {"heads", 1}, {"k", 300}, {"v", 4}}, none);
  EXPECT_NE(s.status().message().find("shape.k"), std::string::npos) << s.status();
  s = DescribeOp("quantize_int8", json{{"tokens", 1}, {"heads", 1}}, none);
  EXPECT_NE(s.status().message().find("shape.dim"), std::string::npos) << s.status();
  const json one = {{"batch", 1}, {"heads", 1}, {"k", 4}, {"v", 4}};
  s = DescribeOp("kda_decode", one, json{{"variant", "fastest"}});
  EXPECT_NE(s.status().message().find("fastest"), std::string::npos) << s.status();
  s = DescribeOp("kda_prefill", json{{"tokens", 1}, {"heads", 1}, {"k", 4}, {"v", 4}},
                 json{{"variant", "fused"}});
  EXPECT_NE(s.status().message().find("has no variants"), std::string::npos) << s.status();
  s = DescribeOp("quantize_int8", json{{"tokens", 1}, {"heads", 1}, {"dim", 4}},
                 json{{"variant", "fused"}});
  EXPECT_NE(s.status().message().find("has no variants"), std::string::npos) << s.status();
  s = DescribeOp("kda_decode", json{{"tokens", 8}, {"batch", 1}, {"heads", 1}, {"k", 4}, {"v", 4}},
                 none);
  EXPECT_NE(s.status().message().find("not both"), std::string::npos) << s.status();
  EXPECT_FALSE(RunOp("kda_decode", json{{"batch", 1}, {"heads", 1}, {"k", 4}, {"v", 4}}, none,
                     false, {}, {})
                   .ok());
}

}  // namespace
}  // namespace densegate::kernels::runner
