#include "runtime/kv_cache.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/kda_state_store.h"
#include "runtime/kv_transfer.h"
#include "runtime/memory_gauge.h"
#include "runtime/random.h"

namespace densegate::runtime {
namespace {

using kernels::KvFormat;

constexpr KvFormat kAllFormats[] = {KvFormat::kFp32, KvFormat::kBf16,
                                    KvFormat::kFp8E4M3, KvFormat::kFp8E5M2,
                                    KvFormat::kInt8};

KvCacheOptions Options(KvFormat format, int num_blocks = 32) {
  KvCacheOptions o;
  o.name = "test KV cache";
  o.num_layers = 2;
  o.num_kv_heads = 2;
  o.head_dim = 16;
  o.block_size = 16;
  o.num_blocks = num_blocks;
  o.format = format;
  return o;
}

std::unique_ptr<PagedKvCache> MakeCache(const KvCacheOptions& o,
                                        MemoryGauge* gauge = nullptr) {
  absl::StatusOr<std::unique_ptr<PagedKvCache>> c =
      PagedKvCache::Create(o, gauge);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(*c);
}

std::vector<float> RandomValues(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Uniform(-2, 2));
  return v;
}

// Per-element error bound of each format for |x| <= 2 (kv_quant.h).
double Bound(KvFormat f, double x, double range) {
  switch (f) {
    case KvFormat::kFp32:
      return 0;
    case KvFormat::kBf16:
      return std::ldexp(std::abs(x), -8) + 1e-30;
    case KvFormat::kFp8E4M3:
      return std::max(std::ldexp(std::abs(x), -4), std::ldexp(1.0, -10));
    case KvFormat::kFp8E5M2:
      return std::max(std::ldexp(std::abs(x), -3), std::ldexp(1.0, -17));
    case KvFormat::kInt8:
      return 0.5 * range / 255 * (1 + 1e-3) + 1e-6;
  }
  return 0;
}

TEST(KvCacheTest, WriteThenReadWithinEachFormatsBound) {
  const int kTokens = 40;  // Three blocks, the last partly used.
  for (KvFormat f : kAllFormats) {
    SCOPED_TRACE(std::string(kernels::KvFormatName(f)));
    auto cache = MakeCache(Options(f));
    absl::StatusOr<std::vector<int32_t>> blocks = cache->Allocate(kTokens);
    ASSERT_TRUE(blocks.ok());
    ASSERT_EQ(blocks->size(), 3u);
    const size_t row = 2 * 16;
    const std::vector<float> k = RandomValues(kTokens * row, 1);
    const std::vector<float> v = RandomValues(kTokens * row, 2);
    // Two writes (a chunk, then single tokens), as prefill and decode do.
    ASSERT_TRUE(
        cache->Write(*blocks, 1, 0, 30, k.data(), row, v.data(), row).ok());
    for (int t = 30; t < kTokens; ++t) {
      ASSERT_TRUE(cache
                      ->Write(*blocks, 1, t, 1, k.data() + t * row, row,
                              v.data() + t * row, row)
                      .ok());
    }
    std::vector<float> k_out(kTokens * row), v_out(kTokens * row);
    ASSERT_TRUE(
        cache->Read(*blocks, 1, kTokens, k_out.data(), v_out.data()).ok());
    for (size_t i = 0; i < k.size(); ++i) {
      // INT8's range is per (token, head) vector of 16.
      const size_t vec = i / 16 * 16;
      auto range = [&](const std::vector<float>& x) {
        float lo = x[vec], hi = x[vec];
        for (size_t j = vec; j < vec + 16; ++j) {
          lo = std::min(lo, x[j]);
          hi = std::max(hi, x[j]);
        }
        return hi - lo;
      };
      ASSERT_LE(std::abs(k_out[i] - k[i]), Bound(f, k[i], range(k))) << i;
      ASSERT_LE(std::abs(v_out[i] - v[i]), Bound(f, v[i], range(v))) << i;
    }
  }
}

TEST(KvCacheTest, QuantizedFormatsTakeHalfOfBf16PlusScales) {
  auto bytes = [](KvFormat f, kernels::ScaleDtype s) {
    KvCacheOptions o = Options(f);
    o.scale_dtype = s;
    return MakeCache(o)->block_bytes();
  };
  const size_t fp32 = bytes(KvFormat::kFp32, kernels::ScaleDtype::kFp32);
  const size_t bf16 = bytes(KvFormat::kBf16, kernels::ScaleDtype::kFp32);
  // 2 layers x (K, V) x 16 tokens x 2 heads x 16 dims.
  const size_t elements = 2 * 2 * 16 * 2 * 16;
  EXPECT_EQ(fp32, elements * 4);
  EXPECT_EQ(bf16, elements * 2);
  EXPECT_EQ(bytes(KvFormat::kFp8E4M3, kernels::ScaleDtype::kFp32), bf16 / 2);
  EXPECT_EQ(bytes(KvFormat::kFp8E5M2, kernels::ScaleDtype::kFp32), bf16 / 2);
  // INT8: codes plus one scale and one zero point per token and head.
  const size_t vectors = 2 * 2 * 16 * 2;
  EXPECT_EQ(bytes(KvFormat::kInt8, kernels::ScaleDtype::kFp32),
            bf16 / 2 + vectors * 2 * 4);
  EXPECT_EQ(bytes(KvFormat::kInt8, kernels::ScaleDtype::kFp16),
            bf16 / 2 + vectors * 2 * 2);
}

TEST(KvCacheTest, OutOfRangeWriteFailsAndCorruptsNoOtherRequest) {
  auto cache = MakeCache(Options(KvFormat::kFp32));
  absl::StatusOr<std::vector<int32_t>> a = cache->Allocate(16);
  absl::StatusOr<std::vector<int32_t>> b = cache->Allocate(16);
  ASSERT_TRUE(a.ok() && b.ok());
  const size_t row = 32;
  const std::vector<float> kb = RandomValues(16 * row, 3);
  ASSERT_TRUE(cache->Write(*b, 0, 0, 16, kb.data(), row, kb.data(), row).ok());
  // Request a owns one block: position 16 is not its to write.
  const std::vector<float> ka = RandomValues(row, 4);
  absl::Status s = cache->Write(*a, 0, 16, 1, ka.data(), row, ka.data(), row);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  std::vector<float> k_out(16 * row), v_out(16 * row);
  ASSERT_TRUE(cache->Read(*b, 0, 16, k_out.data(), v_out.data()).ok());
  EXPECT_EQ(k_out, kb);
  // A forged block table is refused too.
  const std::vector<int32_t> forged = {99};
  EXPECT_EQ(
      cache->Write(forged, 0, 0, 1, ka.data(), row, ka.data(), row).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(KvCacheTest, GaugeFollowsAllocations) {
  MemoryGauge total;
  MemoryGauge gauge(&total);
  auto cache = MakeCache(Options(KvFormat::kBf16), &gauge);
  absl::StatusOr<std::vector<int32_t>> a = cache->Allocate(40);  // 3 blocks
  absl::StatusOr<std::vector<int32_t>> b = cache->Allocate(1);   // 1 block
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(gauge.current(), 4 * static_cast<int64_t>(cache->block_bytes()));
  ASSERT_TRUE(cache->Free(*a).ok());
  EXPECT_EQ(gauge.current(), static_cast<int64_t>(cache->block_bytes()));
  EXPECT_EQ(gauge.peak(), 4 * static_cast<int64_t>(cache->block_bytes()));
  EXPECT_EQ(total.peak(), gauge.peak());
  ASSERT_TRUE(cache->Free(*b).ok());
  EXPECT_EQ(total.current(), 0);
}

TEST(KvTransferTest, CopiesBlocksInRunsAndTheKdaState) {
  for (KvFormat f : {KvFormat::kFp32, KvFormat::kInt8}) {
    auto src = MakeCache(Options(f));
    auto dst = MakeCache(Options(f));
    KdaStateStore src_states("src", 2, 3, 2, 4, 4, nullptr);
    KdaStateStore dst_states("dst", 2, 3, 2, 4, 4, nullptr);
    // Destination: blocks 0..1 taken by someone else, then a fragmented run.
    absl::StatusOr<std::vector<int32_t>> other = dst->Allocate(32);
    const int kTokens = 50;  // 4 blocks.
    absl::StatusOr<std::vector<int32_t>> s_blocks = src->Allocate(kTokens);
    std::vector<int32_t> d_blocks = {5, 6, 9, 10, 11};  // Capacity for decode.
    ASSERT_TRUE(other.ok() && s_blocks.ok());
    const size_t row = 32;
    const std::vector<float> k = RandomValues(kTokens * row, 5);
    const std::vector<float> v = RandomValues(kTokens * row, 6);
    for (int layer = 0; layer < 2; ++layer) {
      ASSERT_TRUE(
          src->Write(*s_blocks, layer, 0, kTokens, k.data(), row, v.data(), row)
              .ok());
    }
    const int s_slot = *src_states.Acquire();
    const int d_slot = *dst_states.Acquire();
    for (int l = 0; l < 3; ++l) {
      float* state = src_states.State(l, s_slot);
      for (size_t i = 0; i < src_states.layer_floats(); ++i)
        state[i] = l + 0.5f * i;
    }
    absl::StatusOr<TransferStats> stats =
        CopySequence({src.get(), *s_blocks, &src_states, s_slot},
                     {dst.get(), d_blocks, &dst_states, d_slot}, kTokens);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->kv_blocks, 4);
    EXPECT_EQ(stats->kv_runs, 2);  // {0,1}->{5,6} and {2,3}->{9,10}.
    EXPECT_EQ(stats->bytes, static_cast<int64_t>(4 * src->block_bytes() +
                                                 3 * src_states.layer_floats() *
                                                     sizeof(float)));
    for (int layer = 0; layer < 2; ++layer) {
      std::vector<float> k1(kTokens * row), v1(kTokens * row),
          k2(kTokens * row), v2(kTokens * row);
      ASSERT_TRUE(
          src->Read(*s_blocks, layer, kTokens, k1.data(), v1.data()).ok());
      ASSERT_TRUE(
          dst->Read(d_blocks, layer, kTokens, k2.data(), v2.data()).ok());
      EXPECT_EQ(k1, k2);
      EXPECT_EQ(v1, v2);
    }
    for (int l = 0; l < 3; ++l) {
      EXPECT_EQ(0, std::memcmp(src_states.State(l, s_slot),
                               dst_states.State(l, d_slot),
                               src_states.layer_floats() * sizeof(float)));
    }
  }
}

TEST(KvTransferTest, RefusesMismatchedLayoutsAndShortTables) {
  auto a = MakeCache(Options(KvFormat::kFp32));
  auto b = MakeCache(Options(KvFormat::kBf16));
  KdaStateStore states("s", 2, 1, 1, 4, 4, nullptr);
  const std::vector<int32_t> one = {0};
  EXPECT_EQ(
      CopySequence({a.get(), one, &states, 0}, {b.get(), one, &states, 1}, 8)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  auto c = MakeCache(Options(KvFormat::kFp32));
  EXPECT_EQ(
      CopySequence({a.get(), one, &states, 0}, {c.get(), one, &states, 1}, 17)
          .status()
          .code(),
      absl::StatusCode::kOutOfRange);
}

TEST(KdaStateStoreTest, SlotsAreLowestFirstAndContiguous) {
  MemoryGauge gauge;
  KdaStateStore s("states", 4, 2, 2, 4, 4, &gauge);
  EXPECT_EQ(s.slot_bytes(), 2u * 2 * 4 * 4 * sizeof(float));
  EXPECT_EQ(*s.Acquire(), 0);
  EXPECT_EQ(*s.Acquire(), 1);
  EXPECT_EQ(*s.TryAcquire(), 2);
  EXPECT_EQ(s.State(1, 1), s.State(1, 0) + s.layer_floats());
  ASSERT_TRUE(s.Release(1).ok());
  EXPECT_EQ(*s.Acquire(), 1);
  EXPECT_EQ(gauge.current(), 3 * static_cast<int64_t>(s.slot_bytes()));
  EXPECT_EQ(*s.TryAcquire(), 3);
  EXPECT_EQ(s.TryAcquire().status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.Release(7).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace densegate::runtime
