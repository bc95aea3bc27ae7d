#include "runtime/kv_transfer.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace densegate::runtime {

absl::StatusOr<TransferStats> CopySequence(const SequenceRef& src,
                                           const SequenceRef& dst, int tokens) {
  if (!src.kv->SameLayout(*dst.kv) || !src.states->SameLayout(*dst.states)) {
    return absl::FailedPreconditionError(
        "transfer: source and destination caches have different layouts "
        "(format, shapes or block size)");
  }
  const int n_blocks = src.kv->BlocksFor(tokens);
  if (n_blocks > static_cast<int>(src.blocks.size()) ||
      n_blocks > static_cast<int>(dst.blocks.size())) {
    return absl::OutOfRangeError(absl::StrFormat(
        "transfer: %d tokens need %d blocks; source has %d, destination %d",
        tokens, n_blocks, src.blocks.size(), dst.blocks.size()));
  }
  TransferStats stats;
  const size_t block_bytes = src.kv->block_bytes();
  for (int i = 0; i < n_blocks;) {
    int j = i + 1;
    while (j < n_blocks && src.blocks[j] == src.blocks[j - 1] + 1 &&
           dst.blocks[j] == dst.blocks[j - 1] + 1) {
      ++j;
    }
    std::memcpy(dst.kv->BlockData(dst.blocks[i]),
                src.kv->BlockData(src.blocks[i]), (j - i) * block_bytes);
    ++stats.kv_runs;
    i = j;
  }
  stats.kv_blocks = n_blocks;
  stats.bytes = static_cast<int64_t>(n_blocks) * block_bytes;
  const size_t layer_bytes = src.states->layer_floats() * sizeof(float);
  for (int l = 0; l < src.states->num_layers(); ++l) {
    std::memcpy(dst.states->State(l, dst.state_slot),
                src.states->State(l, src.state_slot), layer_bytes);
    stats.bytes += layer_bytes;
  }
  return stats;
}

}  // namespace densegate::runtime
