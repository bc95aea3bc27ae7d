// Paged KV cache of the attention layers. Memory is one arena of fixed-size
// blocks of `block_size` tokens; a request owns a list of blocks (its block
// table, from Allocate) and the token at position p lives in slot p %
// block_size of block table[p / block_size]. Within a block, each attention
// layer has a K plane and a V plane, each holding the element codes of
// block_size x kv_heads vectors of head_dim in the cache's storage format
// (kernels/kvcache: fp32, bf16, fp8 e4m3/e5m2, int8 with one scale and zero
// point per token and head) followed by their INT8 parameters. A block is
// one contiguous byte range, so consecutive blocks copy with one memcpy.
//
// Thread-safety: allocation and freeing are thread-safe. Reads and writes
// are thread-compatible per block: callers touch only blocks they own, so
// different requests' reads and writes run concurrently without locks.
#ifndef DENSEGATE_RUNTIME_KV_CACHE_H_
#define DENSEGATE_RUNTIME_KV_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kvcache/kv_quant.h"
#include "runtime/block_allocator.h"
#include "runtime/memory_gauge.h"

namespace densegate::runtime {

struct KvCacheOptions {
  std::string name = "KV cache";  // For error messages.
  int num_layers = 1;             // Attention layers (may be 0).
  int num_kv_heads = 1;
  int head_dim = 1;
  int block_size = 16;
  int num_blocks = 1;
  kernels::KvFormat format = kernels::KvFormat::kFp32;
  kernels::ScaleDtype scale_dtype = kernels::ScaleDtype::kFp32;
};

class PagedKvCache {
 public:
  // InvalidArgument for non-positive sizes (num_layers may be 0). `gauge` (may
  // be null) is charged block_bytes() per allocated block.
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(
      const KvCacheOptions& options, MemoryGauge* gauge);
  ~PagedKvCache();

  const KvCacheOptions& options() const { return options_; }
  // Bytes of one block (all layers, K and V, codes and scales).
  size_t block_bytes() const { return block_bytes_; }
  // The same, before a cache exists (num_blocks is ignored): what sizes a
  // cache to a memory budget.
  static size_t BlockBytes(const KvCacheOptions& options);
  // Storage per cached token: block_bytes() / block_size.
  double bytes_per_token() const;
  // Blocks needed to hold `tokens` tokens.
  int BlocksFor(int tokens) const;

  // Blocks for `tokens` tokens: at once or ResourceExhausted
  // (TryAllocate), or waiting for other requests to free theirs (Allocate);
  // see BlockAllocator.
  absl::StatusOr<std::vector<int32_t>> TryAllocate(int tokens);
  absl::StatusOr<std::vector<int32_t>> Allocate(int tokens);
  absl::Status Free(absl::Span<const int32_t> blocks);
  // Cancels waiting Allocate calls (engine shutdown).
  void Shutdown() { allocator_.Shutdown(); }
  const BlockAllocator& allocator() const { return allocator_; }

  // Stores n tokens at positions [first_pos, first_pos + n) of `layer`:
  // token t's K is k[t * k_stride ...] (kv_heads * head_dim floats), V
  // likewise. OutOfRange if a position is beyond the block table.
  absl::Status Write(absl::Span<const int32_t> blocks, int layer, int first_pos,
                     int n, const float* k, size_t k_stride, const float* v,
                     size_t v_stride);

  // Dequantizes positions [0, n) of `layer` into k_out and v_out, each
  // [n][kv_heads][head_dim].
  absl::Status Read(absl::Span<const int32_t> blocks, int layer, int n,
                    float* k_out, float* v_out) const;

  // Raw bytes of a block, for the transfer engine.
  uint8_t* BlockData(int32_t block) {
    return arena_.get() + static_cast<size_t>(block) * block_bytes_;
  }
  const uint8_t* BlockData(int32_t block) const {
    return arena_.get() + static_cast<size_t>(block) * block_bytes_;
  }
  // Whether blocks of `other` have the same byte layout (copyable as is).
  bool SameLayout(const PagedKvCache& other) const;

 private:
  struct ArenaDeleter {
    void operator()(uint8_t* p) const;
  };

  PagedKvCache(const KvCacheOptions& options, MemoryGauge* gauge);
  // Start of the codes / scales of (layer, K = 0 or V = 1) in a block.
  size_t PlaneOffset(int layer, int kv) const;
  absl::Status CheckSpan(absl::Span<const int32_t> blocks, int end_pos) const;

  const KvCacheOptions options_;
  MemoryGauge* const gauge_;
  BlockAllocator allocator_;
  size_t vectors_per_token_;  // kv_heads.
  size_t code_bytes_;         // Codes of one plane (block_size tokens).
  size_t scale_bytes_;        // INT8 parameters of one plane.
  size_t plane_bytes_;
  size_t block_bytes_;
  std::unique_ptr<uint8_t[], ArenaDeleter> arena_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_KV_CACHE_H_
