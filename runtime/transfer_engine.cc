#include "runtime/transfer_engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/kv_transfer.h"

namespace densegate::runtime {

TransferEngine::TransferEngine(PoolCache* from, PoolCache* to, int workers,
                               Telemetry telemetry, FinishFn finish,
                               CopyFn copy)
    : from_(from),
      to_(to),
      telemetry_(telemetry),
      finish_(std::move(finish)),
      copy_(std::move(copy)) {
  for (int i = 0; i < workers; ++i) {
    threads_.emplace_back(&TransferEngine::Work, this, i);
  }
}

TransferEngine::~TransferEngine() { Shutdown(); }

void TransferEngine::Submit(std::unique_ptr<Sequence> seq) {
  seq->queued_ns = telemetry_.clock->NowNanos();
  if (!queue_.Push(seq)) {
    finish_(std::move(seq), absl::CancelledError("engine is shutting down"));
  }
}

void TransferEngine::Work(int index) {
  if (telemetry_.tracer != nullptr) {
    telemetry_.tracer->NameThread(absl::StrCat("transfer-", index));
  }
  while (std::optional<std::unique_ptr<Sequence>> seq = queue_.Pop()) {
    Transfer(std::move(*seq));
  }
}

void TransferEngine::Transfer(std::unique_ptr<Sequence> seq) {
  StageStats* stats = telemetry_.stats;
  stats->queue_ns.fetch_add(telemetry_.clock->NowNanos() - seq->queued_ns);
  // Room in the decode pool for the whole generation; waits while the
  // decode pool is full (back-pressure on prefill).
  absl::StatusOr<Residency> dst = to_->Reserve(seq->cached_tokens(), true);
  if (!dst.ok()) {
    finish_(std::move(seq), dst.status());
    return;
  }
  // The copy holds no lock: decode workers take ready_mu_ before every
  // step, so copying under it would stall decoding for the whole copy.
  absl::StatusOr<TransferStats> copied = Copy(*seq, *dst);
  absl::Status released = from_->Release(&seq->residency);
  seq->residency = std::move(*dst);
  if (!copied.ok() || !released.ok()) {
    finish_(std::move(seq), copied.ok() ? released : copied.status());
    return;
  }
  stats->transfers.fetch_add(1);
  stats->transfer_bytes.fetch_add(copied->bytes);
  stats->transfer_runs.fetch_add(copied->kv_runs);
  stats->transfer_blocks.fetch_add(copied->kv_blocks);
  Publish(std::move(seq));
}

absl::StatusOr<TransferStats> TransferEngine::Copy(const Sequence& seq,
                                                   const Residency& dst) {
  ScopedSpan span(telemetry_.tracer, telemetry_.clock, "transfer", "stage",
                  &telemetry_.stats->transfer_ns,
                  {{"request", seq.request.id}});
  absl::StatusOr<TransferStats> copied =
      copy_(from_->Ref(seq.residency), to_->Ref(dst), seq.prompt_len());
  if (copied.ok()) {
    span.AddArg("bytes", copied->bytes);
    span.AddArg("runs", copied->kv_runs);
  }
  return copied;
}

void TransferEngine::Publish(std::unique_ptr<Sequence> seq) {
  seq->queued_ns = telemetry_.clock->NowNanos();
  {
    absl::MutexLock lock(&ready_mu_);
    if (!stopped_) {
      ready_.push_back(std::move(seq));
      return;
    }
  }
  finish_(std::move(seq), absl::CancelledError("engine is shutting down"));
}

std::vector<std::unique_ptr<Sequence>> TransferEngine::TakeReady(int max,
                                                                 bool wait) {
  std::vector<std::unique_ptr<Sequence>> out;
  absl::MutexLock lock(&ready_mu_);
  if (wait) {
    ready_mu_.Await(absl::Condition(this, &TransferEngine::ReadyOrStopped));
  }
  while (static_cast<int>(out.size()) < max && !ready_.empty()) {
    out.push_back(std::move(ready_.front()));
    ready_.pop_front();
  }
  return out;
}

void TransferEngine::Shutdown() {
  queue_.Close();
  to_->Shutdown();  // Wakes a worker waiting for decode-pool space.
  // Workers drain the closed queue (cancelled transfers end their
  // sequences) before they exit.
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::deque<std::unique_ptr<Sequence>> ready;
  {
    absl::MutexLock lock(&ready_mu_);
    stopped_ = true;
    ready.swap(ready_);
  }
  for (std::unique_ptr<Sequence>& seq : ready) {
    finish_(std::move(seq), absl::CancelledError("engine is shutting down"));
  }
}

}  // namespace densegate::runtime
