// AttendOne against the fp64 reference, across paths and key layouts.
#include "kernels/ops/attention.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops/cpu_path.h"
#include "kernels/ops/reference.h"

namespace densegate::kernels {
namespace {

uint64_t FreshSeed() {
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

TEST(AttentionTest, MatchesReferenceForPagedAndStridedKeys) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(::testing::Message() << "seed=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t head_dim : {size_t{64}, size_t{80}, size_t{128}}) {
    for (size_t n_keys : {size_t{1}, size_t{5}, size_t{33}, size_t{700}}) {
      SCOPED_TRACE(::testing::Message() << "head_dim=" << head_dim << " n_keys=" << n_keys);
      const size_t v_dim = head_dim + 8;
      // A "paged" cache: blocks of 16 tokens at scattered places in a pool,
      // K and V of a token side by side (stride head_dim + v_dim).
      const size_t stride = head_dim + v_dim;
      const size_t block = 16, n_blocks = (n_keys + block - 1) / block;
      std::vector<float> pool((n_blocks * 2 + 1) * block * stride);
      for (float& v : pool) v = normal(rng);
      std::vector<const float*> keys(n_keys), values(n_keys);
      for (size_t j = 0; j < n_keys; ++j) {
        const size_t phys_block = (n_blocks - 1 - j / block) * 2 + 1;  // Reversed, gapped.
        const float* row = pool.data() + (phys_block * block + j % block) * stride;
        keys[j] = row;
        values[j] = row + head_dim;
      }
      std::vector<float> q(head_dim);
      for (float& v : q) v = 2.0f * normal(rng);
      const AttentionShape shape{n_keys, head_dim, v_dim,
                                 1.0f / std::sqrt(static_cast<float>(head_dim))};
      std::vector<double> ref(v_dim);
      AttendOneReference(q.data(), keys.data(), values.data(), n_keys, head_dim,
                         v_dim, shape.scale, ref.data());
      std::vector<float> out_port(v_dim), out_fast(v_dim), probs(n_keys);
      ASSERT_TRUE(AttendOne(q.data(), keys.data(), values.data(), shape,
                            out_port.data(), probs.data(), CpuPath::kPortable).ok());
      ASSERT_TRUE(AttendOne(q.data(), keys.data(), values.data(), shape,
                            out_fast.data(), probs.data()).ok());
      EXPECT_EQ(std::memcmp(out_port.data(), out_fast.data(), v_dim * sizeof(float)), 0);
      const ErrorStats st = CompareToReference(out_fast.data(), ref.data(), v_dim);
      EXPECT_LT(st.rel_rms, 2e-6);
      EXPECT_LT(st.max_abs, 1e-5);
      const double psum = std::accumulate(probs.begin(), probs.end(), 0.0);
      EXPECT_NEAR(psum, 1.0, 1e-5);
      // A contiguous copy through the strided entry point: identical bits.
      std::vector<float> contiguous(n_keys * stride);
      for (size_t j = 0; j < n_keys; ++j) {
        std::memcpy(contiguous.data() + j * stride, keys[j], stride * sizeof(float));
      }
      std::vector<float> out_strided(v_dim);
      ASSERT_TRUE(AttendOneStrided(q.data(), contiguous.data(), stride,
                                   contiguous.data() + head_dim, stride, shape,
                                   out_strided.data(), probs.data()).ok());
      EXPECT_EQ(std::memcmp(out_strided.data(), out_fast.data(), v_dim * sizeof(float)), 0);
    }
  }
}

TEST(AttentionTest, EdgeCases) {
  const float q[4] = {1, 2, 3, 4};
  const float k0[4] = {0.5f, 0, 0, 0};
  const float v0[3] = {7, -8, 9};
  const float* keys[1] = {k0};
  const float* values[1] = {v0};
  float out[3] = {1, 1, 1};
  float probs[1];
  // One key: probability 1, out == v exactly.
  ASSERT_TRUE(AttendOne(q, keys, values, {1, 4, 3, 0.5f}, out, probs).ok());
  EXPECT_EQ(probs[0], 1.0f);
  EXPECT_EQ(out[0], 7.0f);
  EXPECT_EQ(out[1], -8.0f);
  EXPECT_EQ(out[2], 9.0f);
  // No keys: zeros.
  ASSERT_TRUE(AttendOne(q, nullptr, nullptr, {0, 4, 3, 0.5f}, out, nullptr).ok());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(AttendOne(q, keys, values, {1, 0, 3, 0.5f}, out, probs).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttendOne(q, keys, values, {1, 4, 3, 0.5f}, out, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace densegate::kernels
