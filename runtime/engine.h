// The serving engine: runs requests through the hybrid model with
// continuous batching, in one of two modes.
//
//   kEpd (encode / prefill / decode disaggregation): three worker pools
//   connected by queues, each pool with its own threads:
//     encode pool   validates a request and embeds its prompt;
//     prefill pool  runs the prompt in chunks (token_budget tokens, aligned
//                   to kPrefillAlignment) in the prefill pool's own caches
//                   and samples the first token;
//     transfer      the TransferEngine copies the KV blocks and KDA state
//                   into the decode pool's caches on its own threads;
//     decode pool   each worker runs a continuous batch (DecodeBatch).
//   kColocated: one pool does everything; each worker alternates one
//   prefill chunk of a new request (if any, within the token budget left
//   after its batch) with one decode step of its batch, in one cache.
//
// Results do not depend on the mode, the batch a request shares, or the
// thread counts (see HybridModel): a request's tokens are a function of the
// request, the model and the KV format.
//
// Every submitted request finishes exactly once through the observer; a
// bad request (bad field, too long, never fits the cache) finishes with an
// error naming why, and never disturbs the others.
//
// Thread-safe: Submit, WaitIdle and the getters may be called from any
// thread.
#ifndef DENSEGATE_RUNTIME_ENGINE_H_
#define DENSEGATE_RUNTIME_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "kernels/kvcache/kv_quant.h"
#include "runtime/clock.h"
#include "runtime/hybrid_model.h"
#include "runtime/logger.h"
#include "runtime/memory_gauge.h"
#include "runtime/request.h"
#include "runtime/stage_stats.h"
#include "runtime/telemetry.h"
#include "runtime/tracer.h"

namespace densegate::runtime {

enum class EngineMode { kEpd, kColocated };

// "epd", "colocated" and back.
absl::string_view EngineModeName(EngineMode mode);
absl::StatusOr<EngineMode> ParseEngineMode(absl::string_view name);

struct EngineOptions {
  EngineMode mode = EngineMode::kEpd;
  // Threads of each pool. kEpd uses the first four, kColocated the last.
  int encode_workers = 1;
  int prefill_workers = 1;
  int transfer_workers = 1;
  int decode_workers = 1;
  int colocated_workers = 1;
  // Sequences in one worker's decode batch.
  int max_batch_size = 8;
  // Tokens one worker runs in one forward pass: a decode batch counts one
  // per sequence, a prefill chunk its length. kColocated needs room for a
  // full batch plus one aligned chunk: >= max_batch_size + kPrefillAlignment;
  // kEpd's prefill needs >= kPrefillAlignment.
  int token_budget = 256;
  kernels::KvFormat kv_format = kernels::KvFormat::kFp32;
  kernels::ScaleDtype kv_scale_dtype = kernels::ScaleDtype::kFp32;
  // KV-cache capacity in tokens of each cache (the decode and prefill
  // caches in kEpd, the single cache in kColocated); 0 picks room for
  // max_batch_size full-context requests per decode/colocated worker and
  // two per prefill worker.
  int kv_cache_tokens = 0;
  // Alternatively, a memory budget of each cache in KiB: the cache holds as
  // many blocks of kv_format as fit, so a denser format serves more
  // requests at once. At most one of the two is set.
  int kv_cache_kib = 0;

  const Clock* clock = SteadyClock::Get();
  Tracer* tracer = nullptr;  // Optional.
  Logger* logger = nullptr;  // Optional.
};

// Checks every option; messages name the option.
absl::Status ValidateEngineOptions(const EngineOptions& options);

// Memory of the caches: what was actually held (not the capacity), at its
// peak and now.
struct MemoryReport {
  int64_t attention_kv_peak_bytes = 0;  // KV blocks of all caches.
  int64_t kda_state_peak_bytes = 0;     // KDA states of all caches.
  int64_t total_peak_bytes = 0;         // Both together.
  int64_t in_use_bytes = 0;             // KV blocks and states held now.
  int64_t kv_block_bytes = 0;           // One block, all attention layers.
  double kv_bytes_per_token = 0;        // Per token, all attention layers.
  int64_t kda_state_bytes_per_request = 0;
};

class PoolCache;
class TransferEngine;
struct Sequence;
template <typename T>
class WorkQueue;

class Engine {
 public:
  // Starts the worker threads. `model` and `observer` must outlive the
  // engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const HybridModel* model, const EngineOptions& options,
      RequestObserver* observer);
  // Stops the workers; requests still in flight finish with Cancelled.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; never blocks on the model.
  void Submit(Request request);

  // Waits until every submitted request has finished.
  void WaitIdle();

  const StageStats& stats() const { return stats_; }
  MemoryReport Memory() const;

 private:
  Engine(const HybridModel* model, const EngineOptions& options,
         RequestObserver* observer);
  absl::Status Start();
  void Shutdown();

  // Ends a sequence: frees its cache and reports it.
  void Finish(std::unique_ptr<Sequence> seq, absl::Status status);
  // Validates and embeds the prompt. On error finishes the sequence (and
  // resets `seq`) and returns false.
  bool Encode(std::unique_ptr<Sequence>& seq);
  // Runs the next prefill chunk of `seq` (in its residency) within `budget`
  // tokens, and samples the first token after the last chunk.
  absl::Status PrefillChunk(Sequence* seq, int budget, ForwardContext* ctx);
  void EncodeWorker(int index);
  void PrefillWorker(int index);
  void DecodeWorker(int index);
  void ColocatedWorker(int index);
  void NameThread(absl::string_view pool, int index);

  const HybridModel* const model_;
  const EngineOptions options_;
  RequestObserver* const observer_;
  StageStats stats_;
  const Telemetry telemetry_;
  // Workers drop what they hold and exit.
  std::atomic<bool> stop_{false};
  MemoryGauge total_gauge_;
  MemoryGauge kv_gauge_{&total_gauge_};
  MemoryGauge state_gauge_{&total_gauge_};

  // kEpd: prefill_cache_ and decode_cache_; kColocated: decode_cache_ only.
  std::unique_ptr<PoolCache> prefill_cache_;
  std::unique_ptr<PoolCache> decode_cache_;
  std::unique_ptr<WorkQueue<std::unique_ptr<Sequence>>> submit_queue_;
  std::unique_ptr<WorkQueue<std::unique_ptr<Sequence>>> prefill_queue_;
  std::unique_ptr<TransferEngine> transfer_;
  // Joined in this order: each stage drains into the next.
  std::vector<std::thread> encode_threads_, prefill_threads_, decode_threads_;

  absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_ENGINE_H_
