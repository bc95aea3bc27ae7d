#include "runtime/block_allocator.h"

#include <algorithm>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/random.h"

namespace densegate::runtime {
namespace {

TEST(BlockAllocatorTest, AllocatesContiguousRunsWhenItCan) {
  BlockAllocator a(16, "test cache");
  absl::StatusOr<std::vector<int32_t>> x = a.TryAllocate(4);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(*x, (std::vector<int32_t>{0, 1, 2, 3}));
  absl::StatusOr<std::vector<int32_t>> y = a.TryAllocate(4);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(*y, (std::vector<int32_t>{4, 5, 6, 7}));
  // Free 0..3: a request of 6 skips the 4-block hole for a run of 6.
  ASSERT_TRUE(a.Free(*x).ok());
  absl::StatusOr<std::vector<int32_t>> z = a.TryAllocate(6);
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(*z, (std::vector<int32_t>{8, 9, 10, 11, 12, 13}));
  // 6 free blocks in two holes (0..3 and 14..15): fragmented allocation.
  absl::StatusOr<std::vector<int32_t>> w = a.TryAllocate(6);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, (std::vector<int32_t>{0, 1, 2, 3, 14, 15}));
  EXPECT_EQ(a.num_free(), 0);
}

TEST(BlockAllocatorTest, NoLeakAfterTenThousandRandomLifetimes) {
  constexpr int kBlocks = 256;
  BlockAllocator a(kBlocks, "test cache");
  Rng rng(42);
  std::map<int, std::vector<int32_t>> live;  // id -> blocks
  std::vector<int> owner(kBlocks, -1);
  int next_id = 0, started = 0, rejected = 0;
  while (started < 10000) {
    if (!live.empty() && (rng.Uniform() < 0.5 || live.size() > 40)) {
      auto it = live.begin();
      std::advance(it, rng.UniformInt(0, live.size() - 1));
      for (int32_t b : it->second) {
        ASSERT_EQ(owner[b], it->first) << "block " << b << " changed owner";
        owner[b] = -1;
      }
      ASSERT_TRUE(a.Free(it->second).ok());
      live.erase(it);
      continue;
    }
    const int n = static_cast<int>(rng.UniformInt(0, 24));
    absl::StatusOr<std::vector<int32_t>> blocks = a.TryAllocate(n);
    ++started;
    if (!blocks.ok()) {
      EXPECT_EQ(blocks.status().code(), absl::StatusCode::kResourceExhausted);
      ++rejected;
      continue;
    }
    ASSERT_EQ(static_cast<int>(blocks->size()), n);
    for (int32_t b : *blocks) {
      ASSERT_EQ(owner[b], -1) << "block " << b << " handed out twice";
      owner[b] = next_id;
    }
    live[next_id++] = std::move(*blocks);
  }
  for (auto& [id, blocks] : live) ASSERT_TRUE(a.Free(blocks).ok());
  EXPECT_EQ(a.num_free(), kBlocks);
  EXPECT_GT(rejected, 0);  // The pool did run full.
  // Everything is allocatable again, as one run.
  absl::StatusOr<std::vector<int32_t>> all = a.TryAllocate(kBlocks);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->front(), 0);
  EXPECT_EQ(all->back(), kBlocks - 1);
}

TEST(BlockAllocatorTest, TooLargeIsRejectedAtOnceWithAClearError) {
  BlockAllocator a(8, "decode KV cache");
  for (bool wait : {false, true}) {
    absl::StatusOr<std::vector<int32_t>> x =
        wait ? a.Allocate(9) : a.TryAllocate(9);
    ASSERT_FALSE(x.ok());
    EXPECT_EQ(x.status().code(), absl::StatusCode::kResourceExhausted);
    const std::string msg(x.status().message());
    EXPECT_NE(msg.find("decode KV cache"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 9 blocks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("only 8"), std::string::npos) << msg;
  }
}

TEST(BlockAllocatorTest, BadFreeChangesNothing) {
  BlockAllocator a(8, "test cache");
  absl::StatusOr<std::vector<int32_t>> x = a.TryAllocate(3);
  ASSERT_TRUE(x.ok());
  const std::vector<int32_t> repeated = {(*x)[0], (*x)[0]};
  const std::vector<int32_t> foreign = {(*x)[0], 7};
  const std::vector<int32_t> out_of_range = {(*x)[0], 8};
  for (const auto& bad : {repeated, foreign, out_of_range}) {
    absl::Status s = a.Free(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(a.num_free(), 5);
  }
  ASSERT_TRUE(a.Free(*x).ok());
  EXPECT_EQ(a.Free(*x).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.num_free(), 8);
}

TEST(BlockAllocatorTest, WaiterGetsBlocksWhenTheyAreFreed) {
  BlockAllocator a(4, "test cache");
  absl::StatusOr<std::vector<int32_t>> held = a.TryAllocate(3);
  ASSERT_TRUE(held.ok());
  std::future<absl::StatusOr<std::vector<int32_t>>> waiter =
      std::async(std::launch::async, [&] { return a.Allocate(2); });
  // It cannot finish before the blocks are freed (1 free, 2 needed)...
  EXPECT_FALSE(a.TryAllocate(2).ok());
  ASSERT_TRUE(a.Free(*held).ok());
  // ...and gets them once they are.
  absl::StatusOr<std::vector<int32_t>> got = waiter.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 2u);
}

TEST(BlockAllocatorTest, ShutdownCancelsWaiters) {
  BlockAllocator a(2, "test cache");
  absl::StatusOr<std::vector<int32_t>> held = a.TryAllocate(2);
  ASSERT_TRUE(held.ok());
  std::future<absl::StatusOr<std::vector<int32_t>>> waiter =
      std::async(std::launch::async, [&] { return a.Allocate(1); });
  a.Shutdown();
  EXPECT_EQ(waiter.get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(a.Allocate(1).status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace densegate::runtime
