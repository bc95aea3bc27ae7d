// Recurrent state of the KDA layers for the requests a worker pool holds:
// one fp32 [heads][K][V] matrix per (KDA layer, slot). A request takes a
// slot for its lifetime in this pool. Within a layer, slots are laid out
// consecutively ([slot][heads][K][V]), so requests in consecutive slots form
// one dense batch for kernels::kda::KdaDecode; slots are handed out
// lowest-first to keep a decode batch in few runs.
//
// Thread-safety: Acquire/Release are thread-safe; a slot's data is touched
// only by the request that holds it (thread-compatible per slot).
#ifndef DENSEGATE_RUNTIME_KDA_STATE_STORE_H_
#define DENSEGATE_RUNTIME_KDA_STATE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/block_allocator.h"
#include "runtime/memory_gauge.h"

namespace densegate::runtime {

class KdaStateStore {
 public:
  // `gauge` (may be null) is charged slot_bytes() per held slot. With
  // num_layers == 0 (a model without KDA layers) slots hold nothing.
  KdaStateStore(std::string name, int num_slots, int num_layers, int heads,
                int k_dim, int v_dim, MemoryGauge* gauge);
  KdaStateStore(const KdaStateStore&) = delete;
  KdaStateStore& operator=(const KdaStateStore&) = delete;

  // A free slot now (ResourceExhausted if none) or once one is released
  // (Cancelled after Shutdown). The state is not cleared: see Clear.
  absl::StatusOr<int> TryAcquire();
  absl::StatusOr<int> Acquire();
  absl::Status Release(int slot);
  void Shutdown() { slots_.Shutdown(); }

  // Zeroes every layer's state of `slot` (a new sequence).
  void Clear(int slot);

  // [heads][K][V] of (layer, slot); slot + 1 follows it directly.
  float* State(int layer, int slot) {
    return data_.data() + LayerOffset(layer) + slot * layer_floats_;
  }
  const float* State(int layer, int slot) const {
    return data_.data() + LayerOffset(layer) + slot * layer_floats_;
  }

  int num_slots() const { return num_slots_; }
  int num_layers() const { return num_layers_; }
  // fp32 values of one slot in one layer.
  size_t layer_floats() const { return layer_floats_; }
  // Bytes of one slot over all layers.
  size_t slot_bytes() const {
    return layer_floats_ * num_layers_ * sizeof(float);
  }
  bool SameLayout(const KdaStateStore& other) const {
    return num_layers_ == other.num_layers_ &&
           layer_floats_ == other.layer_floats_;
  }

 private:
  size_t LayerOffset(int layer) const {
    return static_cast<size_t>(layer) * num_slots_ * layer_floats_;
  }

  const int num_slots_;
  const int num_layers_;
  const size_t layer_floats_;
  MemoryGauge* const gauge_;
  BlockAllocator slots_;
  std::vector<float> data_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_KDA_STATE_STORE_H_
