#include "runtime/kv_cache.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_format.h"
#include "runtime/status_macros.h"

namespace densegate::runtime {
namespace {

constexpr size_t kAlign = 64;

size_t RoundUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Byte sizes of one block's pieces; the cache and BlockBytes() share them.
struct BlockLayout {
  size_t code;   // Codes of one plane (block_size tokens).
  size_t scale;  // INT8 parameters of one plane.
  size_t plane;  // Both, each aligned.
  size_t block;  // K and V planes of every layer.
};

BlockLayout LayoutOf(const KvCacheOptions& o) {
  const size_t vectors = static_cast<size_t>(o.num_kv_heads) * o.block_size;
  BlockLayout l;
  l.code = kernels::KvCodeBytes(o.format, vectors, o.head_dim);
  l.scale = kernels::KvScaleBytes(o.format, o.scale_dtype, vectors);
  l.plane = RoundUp(l.code) + RoundUp(l.scale);
  l.block = l.plane * 2 * o.num_layers;
  return l;
}

}  // namespace

void PagedKvCache::ArenaDeleter::operator()(uint8_t* p) const {
  operator delete[](p, std::align_val_t(kAlign));
}

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(
    const KvCacheOptions& o, MemoryGauge* gauge) {
  auto at_least = [&](const char* field, int v, int min) -> absl::Status {
    if (v >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s must be >= %d, found %d", o.name, field, min, v));
  };
  auto positive = [&](const char* field, int v) {
    return at_least(field, v, 1);
  };
  // A model without attention layers has blocks of zero bytes.
  RT_RETURN_IF_ERROR(at_least("num_layers", o.num_layers, 0));
  RT_RETURN_IF_ERROR(positive("num_kv_heads", o.num_kv_heads));
  RT_RETURN_IF_ERROR(positive("head_dim", o.head_dim));
  RT_RETURN_IF_ERROR(positive("block_size", o.block_size));
  RT_RETURN_IF_ERROR(positive("num_blocks", o.num_blocks));
  return std::unique_ptr<PagedKvCache>(new PagedKvCache(o, gauge));
}

PagedKvCache::PagedKvCache(const KvCacheOptions& o, MemoryGauge* gauge)
    : options_(o),
      gauge_(gauge),
      allocator_(o.num_blocks, o.name),
      vectors_per_token_(o.num_kv_heads) {
  const BlockLayout layout = LayoutOf(o);
  code_bytes_ = layout.code;
  scale_bytes_ = layout.scale;
  plane_bytes_ = layout.plane;
  block_bytes_ = layout.block;
  // Not zeroed: pages are touched only when blocks are used.
  arena_.reset(static_cast<uint8_t*>(operator new[](block_bytes_* o.num_blocks,
                                                    std::align_val_t(kAlign))));
}

PagedKvCache::~PagedKvCache() = default;

size_t PagedKvCache::BlockBytes(const KvCacheOptions& o) { return LayoutOf(o).block; }

double PagedKvCache::bytes_per_token() const {
  return static_cast<double>(block_bytes_) / options_.block_size;
}

int PagedKvCache::BlocksFor(int tokens) const {
  return (tokens + options_.block_size - 1) / options_.block_size;
}

absl::StatusOr<std::vector<int32_t>> PagedKvCache::TryAllocate(int tokens) {
  RT_ASSIGN_OR_RETURN(std::vector<int32_t> blocks,
                      allocator_.TryAllocate(BlocksFor(tokens)));
  if (gauge_ != nullptr) gauge_->Add(blocks.size() * block_bytes_);
  return blocks;
}

absl::StatusOr<std::vector<int32_t>> PagedKvCache::Allocate(int tokens) {
  RT_ASSIGN_OR_RETURN(std::vector<int32_t> blocks,
                      allocator_.Allocate(BlocksFor(tokens)));
  if (gauge_ != nullptr) gauge_->Add(blocks.size() * block_bytes_);
  return blocks;
}

absl::Status PagedKvCache::Free(absl::Span<const int32_t> blocks) {
  // Discharged before the blocks can be reused (see MemoryGauge).
  const int64_t bytes = blocks.size() * block_bytes_;
  if (gauge_ != nullptr) gauge_->Add(-bytes);
  absl::Status status = allocator_.Free(blocks);
  if (!status.ok() && gauge_ != nullptr) gauge_->Add(bytes);
  return status;
}

size_t PagedKvCache::PlaneOffset(int layer, int kv) const {
  return (static_cast<size_t>(layer) * 2 + kv) * plane_bytes_;
}

absl::Status PagedKvCache::CheckSpan(absl::Span<const int32_t> blocks,
                                     int end_pos) const {
  const int64_t capacity =
      static_cast<int64_t>(blocks.size()) * options_.block_size;
  if (end_pos > capacity) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: position %d is beyond the request's %d blocks (%d tokens)",
        options_.name, end_pos - 1, blocks.size(), capacity));
  }
  for (int i = 0; i < BlocksFor(end_pos); ++i) {
    if (blocks[i] < 0 || blocks[i] >= options_.num_blocks) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: block table entry %d holds block %d, outside [0, %d)",
          options_.name, i, blocks[i], options_.num_blocks));
    }
  }
  return absl::OkStatus();
}

absl::Status PagedKvCache::Write(absl::Span<const int32_t> blocks, int layer,
                                 int first_pos, int n, const float* k,
                                 size_t k_stride, const float* v,
                                 size_t v_stride) {
  if (layer < 0 || layer >= options_.num_layers || first_pos < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad write (layer %d, position %d)", options_.name,
                        layer, first_pos));
  }
  RT_RETURN_IF_ERROR(CheckSpan(blocks, first_pos + n));
  const size_t bs = options_.block_size;
  const size_t vec = vectors_per_token_;
  const size_t token_codes = code_bytes_ / bs;
  const size_t token_scales = scale_bytes_ / bs;
  for (int t = 0; t < n; ++t) {
    const size_t pos = first_pos + t;
    uint8_t* block = BlockData(blocks[pos / bs]);
    const size_t slot = pos % bs;
    for (int kv = 0; kv < 2; ++kv) {
      uint8_t* plane = block + PlaneOffset(layer, kv);
      const float* src = kv == 0 ? k + t * k_stride : v + t * v_stride;
      RT_RETURN_IF_ERROR(kernels::Quantize(
          options_.format, src, vec, options_.head_dim,
          plane + slot * token_codes,
          kernels::QuantScales{
              options_.scale_dtype,
              plane + RoundUp(code_bytes_) + slot * token_scales}));
    }
  }
  return absl::OkStatus();
}

absl::Status PagedKvCache::Read(absl::Span<const int32_t> blocks, int layer,
                                int n, float* k_out, float* v_out) const {
  if (layer < 0 || layer >= options_.num_layers || n < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bad read (layer %d, %d tokens)", options_.name, layer, n));
  }
  RT_RETURN_IF_ERROR(CheckSpan(blocks, n));
  const size_t bs = options_.block_size;
  const size_t token_floats = vectors_per_token_ * options_.head_dim;
  for (size_t first = 0; first < static_cast<size_t>(n); first += bs) {
    const size_t count = std::min<size_t>(bs, n - first);
    const uint8_t* block = BlockData(blocks[first / bs]);
    for (int kv = 0; kv < 2; ++kv) {
      const uint8_t* plane = block + PlaneOffset(layer, kv);
      float* out = (kv == 0 ? k_out : v_out) + first * token_floats;
      RT_RETURN_IF_ERROR(kernels::Dequantize(
          options_.format, plane,
          kernels::ConstQuantScales(options_.scale_dtype,
                                    plane + RoundUp(code_bytes_)),
          count * vectors_per_token_, options_.head_dim, out));
    }
  }
  return absl::OkStatus();
}

bool PagedKvCache::SameLayout(const PagedKvCache& other) const {
  const KvCacheOptions& a = options_;
  const KvCacheOptions& b = other.options_;
  return a.num_layers == b.num_layers && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.block_size == b.block_size &&
         a.format == b.format && a.scale_dtype == b.scale_dtype;
}

}  // namespace densegate::runtime
