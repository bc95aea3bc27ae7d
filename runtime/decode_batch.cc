#include "runtime/decode_batch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace densegate::runtime {

DecodeBatch::DecodeBatch(const HybridModel* model, PoolCache* cache,
                         int max_size, Telemetry telemetry, FinishFn finish)
    : model_(model),
      cache_(cache),
      max_size_(max_size),
      telemetry_(telemetry),
      finish_(std::move(finish)) {}

void DecodeBatch::Add(std::unique_ptr<Sequence> seq) {
  auto at =
      std::upper_bound(members_.begin(), members_.end(), seq->residency.slot,
                       [](int slot, const std::unique_ptr<Sequence>& m) {
                         return slot < m->residency.slot;
                       });
  members_.insert(at, std::move(seq));
}

void DecodeBatch::Step(ForwardContext* ctx) {
  // Rows that cannot run leave with their own error before the step.
  rows_.clear();
  for (auto it = members_.begin(); it != members_.end();) {
    const DecodeRow row = (*it)->NextRow();
    absl::Status s =
        model_->CheckDecodeRow(row, cache_->kv(), cache_->states());
    if (!s.ok()) {
      finish_(std::move(*it), s);
      it = members_.erase(it);
      continue;
    }
    rows_.push_back(row);
    ++it;
  }
  if (members_.empty()) return;
  const int vocab = model_->config().vocab_size;
  const int batch = size();
  logits_.resize(static_cast<size_t>(batch) * vocab);
  StageStats* stats = telemetry_.stats;
  absl::Status status;
  {
    ScopedSpan span(telemetry_.tracer, telemetry_.clock, "decode_step", "stage",
                    &stats->decode_ns, {{"batch", batch}});
    status = model_->DecodeStep(rows_, cache_->kv(), cache_->states(),
                                logits_.data(), ctx);
  }
  if (!status.ok()) {
    // Rows were checked, so this is the step itself failing: nothing
    // sampled, every member ends with the reason.
    FinishAll(absl::Status(status.code(),
                           absl::StrCat("decode step: ", status.message())));
    return;
  }
  stats->decode_steps.fetch_add(1);
  stats->decode_rows.fetch_add(batch);
  const int64_t now = telemetry_.clock->NowNanos();
  int kept = 0;
  for (int i = 0; i < batch; ++i) {
    std::unique_ptr<Sequence>& seq = members_[i];
    absl::StatusOr<int32_t> token = GreedySample(absl::MakeConstSpan(
        logits_.data() + static_cast<size_t>(i) * vocab, vocab));
    if (token.ok()) {
      seq->tokens.push_back(*token);
      seq->token_times_ns.push_back(now);
    }
    if (!token.ok() || seq->done()) {
      finish_(std::move(seq), token.status());
    } else {
      if (kept != i) members_[kept] = std::move(seq);
      ++kept;
    }
  }
  members_.resize(kept);
}

void DecodeBatch::FinishAll(const absl::Status& status) {
  for (std::unique_ptr<Sequence>& seq : members_) {
    finish_(std::move(seq), status);
  }
  members_.clear();
}

}  // namespace densegate::runtime
