#include "runtime/pool_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/status_macros.h"

namespace densegate::runtime {

absl::StatusOr<std::unique_ptr<PoolCache>> PoolCache::Create(
    const ModelConfig& config, const PoolCacheOptions& options,
    MemoryGauge* kv_gauge, MemoryGauge* state_gauge) {
  KvCacheOptions kv;
  kv.name = absl::StrCat(options.name, " KV cache");
  kv.num_layers = config.num_attention_layers();
  kv.num_kv_heads = std::max(config.attn_kv_heads, 1);
  kv.head_dim = std::max(config.attn_head_dim, 1);
  kv.block_size = config.kv_block_size;
  kv.format = options.kv_format;
  kv.scale_dtype = options.kv_scale_dtype;
  kv.num_blocks =
      (options.kv_tokens + config.kv_block_size - 1) / config.kv_block_size;
  if (options.kv_bytes > 0) {
    const size_t block = PagedKvCache::BlockBytes(kv);
    // A model without attention layers has zero-byte blocks: nothing to size.
    kv.num_blocks = block == 0 ? 1
                               : static_cast<int>(std::min<int64_t>(
                                     options.kv_bytes / block, 1 << 30));
    if (kv.num_blocks < 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s KV cache: a budget of %d bytes holds no block of %d bytes (%s)",
          options.name, options.kv_bytes, block,
          kernels::KvFormatName(options.kv_format)));
    }
  }
  RT_ASSIGN_OR_RETURN(std::unique_ptr<PagedKvCache> cache,
                      PagedKvCache::Create(kv, kv_gauge));
  auto states = std::make_unique<KdaStateStore>(
      absl::StrCat(options.name, " KDA state store"), options.state_slots,
      config.num_kda_layers(), config.kda_heads, config.kda_head_k_dim,
      config.kda_head_v_dim, state_gauge);
  return std::unique_ptr<PoolCache>(
      new PoolCache(std::move(cache), std::move(states)));
}

PoolCache::PoolCache(std::unique_ptr<PagedKvCache> kv,
                     std::unique_ptr<KdaStateStore> states)
    : kv_(std::move(kv)), states_(std::move(states)) {}

bool PoolCache::NeverFits(int tokens) const {
  return kv_->BlocksFor(tokens) > kv_->allocator().num_blocks() ||
         states_->num_slots() < 1;
}

absl::StatusOr<Residency> PoolCache::Reserve(int tokens, bool wait) {
  Residency r;
  r.cache = this;
  RT_ASSIGN_OR_RETURN(r.blocks,
                      wait ? kv_->Allocate(tokens) : kv_->TryAllocate(tokens));
  absl::StatusOr<int> slot = wait ? states_->Acquire() : states_->TryAcquire();
  if (!slot.ok()) {
    kv_->Free(r.blocks).IgnoreError();  // Ours: cannot fail.
    return slot.status();
  }
  r.slot = *slot;
  return r;
}

absl::Status PoolCache::Release(Residency* r) {
  if (r->cache == nullptr) return absl::OkStatus();
  absl::Status status = kv_->Free(r->blocks);
  if (r->slot >= 0) status.Update(states_->Release(r->slot));
  *r = Residency();
  return status;
}

void PoolCache::Shutdown() {
  kv_->Shutdown();
  states_->Shutdown();
}

}  // namespace densegate::runtime
