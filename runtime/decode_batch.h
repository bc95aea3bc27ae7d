// Continuous batching for one decode worker: sequences join between steps
// (up to a maximum batch size) and leave as soon as they finish. Each Step
// runs one token for every member through one HybridModel::DecodeStep
// (batched GEMMs, KdaDecode over the batch). Members are kept ordered by
// KDA state slot, so consecutive slots share one KdaDecode call.
//
// One request never aborts the batch: a member whose next row is invalid,
// or whose logits cannot be sampled, finishes with its own error and the
// others go on. Internal to runtime/.
//
// Thread-compatible: owned by one worker thread.
#ifndef DENSEGATE_RUNTIME_DECODE_BATCH_H_
#define DENSEGATE_RUNTIME_DECODE_BATCH_H_

#include <memory>
#include <vector>

#include "runtime/hybrid_model.h"
#include "runtime/pool_cache.h"
#include "runtime/sequence.h"
#include "runtime/telemetry.h"

namespace densegate::runtime {

class DecodeBatch {
 public:
  // `finish` receives members that are done or failed; telemetry.stats
  // must not be null.
  DecodeBatch(const HybridModel* model, PoolCache* cache, int max_size,
              Telemetry telemetry, FinishFn finish);

  int size() const { return static_cast<int>(members_.size()); }
  bool empty() const { return members_.empty(); }
  int free_rows() const { return max_size_ - size(); }

  // Precondition: free_rows() > 0, seq has its first token and lives in
  // this batch's cache.
  void Add(std::unique_ptr<Sequence> seq);

  // One decode step for all members.
  void Step(ForwardContext* ctx);

  // Hands every member to `finish` with `status` (shutdown).
  void FinishAll(const absl::Status& status);

 private:
  const HybridModel* const model_;
  PoolCache* const cache_;
  const int max_size_;
  const Telemetry telemetry_;
  const FinishFn finish_;
  std::vector<std::unique_ptr<Sequence>> members_;
  std::vector<DecodeRow> rows_;
  std::vector<float> logits_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_DECODE_BATCH_H_
