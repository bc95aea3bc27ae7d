#include "runtime/kda_state_store.h"

#include <algorithm>
#include <utility>

#include "runtime/status_macros.h"

namespace densegate::runtime {

KdaStateStore::KdaStateStore(std::string name, int num_slots, int num_layers,
                             int heads, int k_dim, int v_dim,
                             MemoryGauge* gauge)
    : num_slots_(num_slots),
      num_layers_(num_layers),
      layer_floats_(static_cast<size_t>(heads) * k_dim * v_dim),
      gauge_(gauge),
      slots_(num_slots, std::move(name)),
      data_(static_cast<size_t>(num_slots) * num_layers * layer_floats_) {}

absl::StatusOr<int> KdaStateStore::TryAcquire() {
  RT_ASSIGN_OR_RETURN(std::vector<int32_t> slot, slots_.TryAllocate(1));
  if (gauge_ != nullptr) gauge_->Add(slot_bytes());
  return slot[0];
}

absl::StatusOr<int> KdaStateStore::Acquire() {
  RT_ASSIGN_OR_RETURN(std::vector<int32_t> slot, slots_.Allocate(1));
  if (gauge_ != nullptr) gauge_->Add(slot_bytes());
  return slot[0];
}

absl::Status KdaStateStore::Release(int slot) {
  // Discharged before the slot can be reused (see MemoryGauge).
  const int64_t bytes = slot_bytes();
  if (gauge_ != nullptr) gauge_->Add(-bytes);
  const int32_t s = slot;
  absl::Status status = slots_.Free({&s, 1});
  if (!status.ok() && gauge_ != nullptr) gauge_->Add(bytes);
  return status;
}

void KdaStateStore::Clear(int slot) {
  for (int l = 0; l < num_layers_; ++l) {
    float* s = State(l, slot);
    std::fill(s, s + layer_floats_, 0.0f);
  }
}

}  // namespace densegate::runtime
