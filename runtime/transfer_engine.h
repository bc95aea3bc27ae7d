// The transfer engine of EPD: takes sequences whose prefill finished,
// moves their cache (KV blocks and KDA state) from the prefill pool's
// caches into the decode pool's own caches with CopySequence, and hands
// them to the decode workers. It runs on its own threads, so prefill goes
// on with the next prompt while a copy runs.
//
// The decode loop polls the ready list (TakeReady) before every step. The
// copy itself runs under no lock: a decode step never waits for a copy,
// only for the short list operations around it (transfer_engine_test holds
// a copy open and checks exactly that). Internal to runtime/.
//
// Thread-safe.
#ifndef DENSEGATE_RUNTIME_TRANSFER_ENGINE_H_
#define DENSEGATE_RUNTIME_TRANSFER_ENGINE_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "runtime/kv_transfer.h"
#include "runtime/pool_cache.h"
#include "runtime/sequence.h"
#include "runtime/telemetry.h"
#include "runtime/work_queue.h"

namespace densegate::runtime {

class TransferEngine {
 public:
  // How one sequence's cache moves between the pools: CopySequence (memcpy
  // of contiguous block runs) in this runtime; another transport, or a
  // test's, plugs in here.
  using CopyFn = std::function<absl::StatusOr<TransferStats>(
      const SequenceRef& src, const SequenceRef& dst, int tokens)>;

  // Starts `workers` threads copying from `from` to `to`. `finish` ends
  // sequences whose transfer failed. telemetry.stats must not be null.
  TransferEngine(PoolCache* from, PoolCache* to, int workers,
                 Telemetry telemetry, FinishFn finish,
                 CopyFn copy = CopySequence);
  // Stops (see Shutdown) and joins the threads.
  ~TransferEngine();

  // Queues a prefilled sequence (its residency in `from`).
  void Submit(std::unique_ptr<Sequence> seq);

  // Up to `max` sequences now resident in `to`, oldest first. With `wait`,
  // blocks while none is ready (returns empty once shut down).
  std::vector<std::unique_ptr<Sequence>> TakeReady(int max, bool wait);

  // Stops the workers; sequences still queued or ready are finished with
  // Cancelled. Idempotent.
  void Shutdown();

 private:
  void Work(int index);
  // Moves one sequence's cache from `from_` to `to_` and publishes it.
  void Transfer(std::unique_ptr<Sequence> seq);
  // The copy itself (copy_, traced); takes no lock.
  absl::StatusOr<TransferStats> Copy(const Sequence& seq, const Residency& dst);
  // Hands a transferred sequence to the decode workers (under ready_mu_).
  void Publish(std::unique_ptr<Sequence> seq);
  bool ReadyOrStopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(ready_mu_) {
    return stopped_ || !ready_.empty();
  }

  PoolCache* const from_;
  PoolCache* const to_;
  const Telemetry telemetry_;
  const FinishFn finish_;
  const CopyFn copy_;
  WorkQueue<std::unique_ptr<Sequence>> queue_;
  std::vector<std::thread> threads_;

  absl::Mutex ready_mu_;
  std::deque<std::unique_ptr<Sequence>> ready_ ABSL_GUARDED_BY(ready_mu_);
  bool stopped_ ABSL_GUARDED_BY(ready_mu_) = false;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_TRANSFER_ENGINE_H_
