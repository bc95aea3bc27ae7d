#include "runtime/decode_batch.h"

#include <map>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/test_util.h"

namespace densegate::runtime {
namespace {

// Three sequences decode together; one of them turns bad (its block table
// is cut short, as a corrupted request would be). It leaves with its own
// error and the others' tokens are exactly those generated alone.
TEST(DecodeBatchTest, OneBadRequestNeverAbortsTheBatch) {
  auto model = testing::TinyModel();
  const ModelConfig& c = model->config();
  PoolCacheOptions options;
  options.name = "decode";
  options.kv_tokens = 1024;
  options.state_slots = 4;
  absl::StatusOr<std::unique_ptr<PoolCache>> cache =
      PoolCache::Create(c, options, nullptr, nullptr);
  ASSERT_TRUE(cache.ok()) << cache.status();
  StageStats stats;
  std::map<int64_t, absl::Status> finished;
  std::map<int64_t, std::vector<int32_t>> tokens;
  Telemetry telemetry{SteadyClock::Get(), nullptr, nullptr, &stats};
  DecodeBatch batch(model.get(), cache->get(), 4, telemetry,
                    [&](std::unique_ptr<Sequence> s, absl::Status status) {
                      EXPECT_TRUE((*cache)->Release(&s->residency).ok());
                      finished[s->request.id] = status;
                      tokens[s->request.id] = s->tokens;
                    });
  constexpr int kNew = 12;
  std::vector<std::vector<int32_t>> expected;
  ForwardContext ctx;
  for (int i = 0; i < 3; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request.id = i;
    seq->request.prompt = testing::RandomPrompt(20 + i, 70 + i, c.vocab_size);
    seq->request.max_new_tokens = kNew;
    expected.push_back(
        testing::GenerateAlone(*model, seq->request.prompt, kNew)->tokens);
    seq->residency = *(*cache)->Reserve(seq->cached_tokens(), false);
    (*cache)->states()->Clear(seq->residency.slot);
    std::vector<float> emb(seq->prompt_len() * c.hidden_size),
        logits(c.vocab_size);
    ASSERT_TRUE(model->Embed(seq->request.prompt, emb.data()).ok());
    ASSERT_TRUE(model
                    ->Prefill((*cache)->Ref(seq->residency), 0,
                              seq->prompt_len(), emb.data(), logits.data(),
                              &ctx)
                    .ok());
    seq->tokens.push_back(*GreedySample(logits));
    if (i == 1) {
      // Keep only the first block: its next position (21) is outside.
      seq->residency.blocks.resize(1);
    }
    batch.Add(std::move(seq));
  }
  while (!batch.empty()) batch.Step(&ctx);
  ASSERT_EQ(finished.size(), 3u);
  EXPECT_EQ(finished[1].code(), absl::StatusCode::kOutOfRange) << finished[1];
  EXPECT_LT(tokens[1].size(), static_cast<size_t>(kNew));
  for (int i : {0, 2}) {
    EXPECT_TRUE(finished[i].ok()) << finished[i];
    EXPECT_EQ(tokens[i], expected[i]) << i;
  }
  // The good ones shared steps: batch rows exceed steps.
  EXPECT_GT(stats.decode_rows.load(), stats.decode_steps.load());
}

}  // namespace
}  // namespace densegate::runtime
