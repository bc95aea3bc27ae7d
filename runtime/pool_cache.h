// The caches of one worker pool (the prefill pool's, the decode pool's, or
// the colocated pool's): a paged KV cache for the attention layers and a
// KDA state store, reserved together for a request (its Residency) and
// released together. Internal to runtime/.
//
// Thread-safe (see PagedKvCache and KdaStateStore).
#ifndef DENSEGATE_RUNTIME_POOL_CACHE_H_
#define DENSEGATE_RUNTIME_POOL_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/hybrid_model.h"
#include "runtime/kda_state_store.h"
#include "runtime/kv_cache.h"
#include "runtime/memory_gauge.h"
#include "runtime/model_config.h"

namespace densegate::runtime {

class PoolCache;

// A request's place in a PoolCache: its block table and state slot.
struct Residency {
  PoolCache* cache = nullptr;  // Null: holds nothing.
  std::vector<int32_t> blocks;
  int slot = -1;
};

struct PoolCacheOptions {
  std::string name;   // "prefill", "decode", "colocated".
  int kv_tokens = 0;  // KV-cache capacity, rounded up to whole blocks.
  // When > 0, the capacity is instead as many whole blocks of kv_format as
  // fit in this many bytes (a memory budget: denser formats hold more).
  int64_t kv_bytes = 0;
  int state_slots = 0;
  kernels::KvFormat kv_format = kernels::KvFormat::kFp32;
  kernels::ScaleDtype kv_scale_dtype = kernels::ScaleDtype::kFp32;
};

class PoolCache {
 public:
  // Gauges (not null) are charged for KV blocks and KDA states in use.
  static absl::StatusOr<std::unique_ptr<PoolCache>> Create(
      const ModelConfig& config, const PoolCacheOptions& options,
      MemoryGauge* kv_gauge, MemoryGauge* state_gauge);

  // Blocks for `tokens` tokens plus a state slot (not cleared), all or
  // nothing. With `wait`, waits for space (Cancelled after Shutdown);
  // without, fails with ResourceExhausted when there is none now. A
  // request larger than the whole cache fails at once either way.
  absl::StatusOr<Residency> Reserve(int tokens, bool wait);
  // Returns what `r` holds (no-op for an empty residency) and empties it.
  absl::Status Release(Residency* r);
  // Whether a request of `tokens` tokens can never get a residency here.
  bool NeverFits(int tokens) const;

  SequenceRef Ref(const Residency& r) {
    return SequenceRef{kv_.get(), r.blocks, states_.get(), r.slot};
  }
  PagedKvCache* kv() { return kv_.get(); }
  KdaStateStore* states() { return states_.get(); }
  void Shutdown();

 private:
  PoolCache(std::unique_ptr<PagedKvCache> kv,
            std::unique_ptr<KdaStateStore> states);

  std::unique_ptr<PagedKvCache> kv_;
  std::unique_ptr<KdaStateStore> states_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_POOL_CACHE_H_
