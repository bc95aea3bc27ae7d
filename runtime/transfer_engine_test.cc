// The transfer engine's contract with the decode loop: a copy in flight
// never blocks TakeReady (no lock is held across a copy), and a sequence
// appears in the ready list only once its cache is in the decode pool.
#include "runtime/transfer_engine.h"

#include <future>
#include <memory>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "runtime/clock.h"
#include "runtime/model_config.h"
#include "runtime/pool_cache.h"
#include "runtime/stage_stats.h"
#include "runtime/test_util.h"

namespace densegate::runtime {
namespace {

std::unique_ptr<PoolCache> Pool(const ModelConfig& config, const char* name) {
  PoolCacheOptions o;
  o.name = name;
  o.kv_tokens = 256;
  o.state_slots = 2;
  static MemoryGauge kv, states;
  absl::StatusOr<std::unique_ptr<PoolCache>> pool = PoolCache::Create(config, o, &kv, &states);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

TEST(TransferEngineTest, ACopyInFlightNeverBlocksTheDecodeLoop) {
  const ModelConfig config = testing::TinyConfig();
  std::unique_ptr<PoolCache> prefill = Pool(config, "prefill");
  std::unique_ptr<PoolCache> decode = Pool(config, "decode");
  ASSERT_NE(prefill, nullptr);
  ASSERT_NE(decode, nullptr);

  absl::Notification copy_started, release_copy;
  auto held_copy = [&](const SequenceRef& src, const SequenceRef& dst, int tokens) {
    copy_started.Notify();
    release_copy.WaitForNotification();
    return CopySequence(src, dst, tokens);
  };
  StageStats stats;
  Telemetry telemetry;
  telemetry.clock = SteadyClock::Get();
  telemetry.stats = &stats;
  absl::Status failed;
  TransferEngine engine(prefill.get(), decode.get(), 1, telemetry,
                        [&](std::unique_ptr<Sequence>, absl::Status s) { failed = s; }, held_copy);

  auto seq = std::make_unique<Sequence>();
  seq->request.id = 7;
  seq->request.prompt = {1, 2, 3, 4, 5};
  seq->request.max_new_tokens = 4;
  absl::StatusOr<Residency> residency = prefill->Reserve(seq->cached_tokens(), false);
  ASSERT_TRUE(residency.ok()) << residency.status();
  seq->residency = *residency;
  engine.Submit(std::move(seq));
  copy_started.WaitForNotification();

  // The decode loop polls between steps while the copy is held open. A lock
  // held across the copy would block this call until the copy ends; the
  // timeout only turns that deadlock into a failure (the call takes
  // microseconds; a longer wait only made every failing run slower).
  std::future<size_t> poll = std::async(std::launch::async, [&] {
    return engine.TakeReady(8, /*wait=*/false).size();
  });
  const bool returned = poll.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  release_copy.Notify();
  ASSERT_TRUE(returned) << "TakeReady blocked while a copy was in flight";
  EXPECT_EQ(poll.get(), 0u) << "a sequence was ready before its copy finished";

  std::vector<std::unique_ptr<Sequence>> ready = engine.TakeReady(8, /*wait=*/true);
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0]->request.id, 7);
  EXPECT_EQ(ready[0]->residency.cache, decode.get());
  EXPECT_TRUE(failed.ok()) << failed;
  EXPECT_EQ(stats.transfers.load(), 1);
  ASSERT_TRUE(decode->Release(&ready[0]->residency).ok());
}

}  // namespace
}  // namespace densegate::runtime
