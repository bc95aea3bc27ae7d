// The copy at the heart of the transfer engine: moves one sequence's cache
// (its attention KV blocks and its KDA state) from one pool's caches to
// another's, e.g. from the prefill pool to the decode pool. KV blocks are
// copied in runs: where both the source and the destination block numbers
// are consecutive, one memcpy moves the whole run (the allocator hands out
// consecutive blocks when it can).
//
// Takes no lock: the caller owns the source and destination blocks and
// slots, which no other thread touches. Thread-safe in that sense.
#ifndef DENSEGATE_RUNTIME_KV_TRANSFER_H_
#define DENSEGATE_RUNTIME_KV_TRANSFER_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/hybrid_model.h"

namespace densegate::runtime {

struct TransferStats {
  int64_t bytes = 0;  // KV blocks plus KDA state.
  int64_t kv_blocks = 0;
  int64_t kv_runs = 0;  // memcpy calls for the KV blocks.
};

// Copies the cache of positions [0, tokens) from `src` to `dst`: the blocks
// covering those tokens and every KDA layer's state. FailedPrecondition if
// the two caches' layouts differ; OutOfRange if either block table is too
// short. Nothing is copied on error.
absl::StatusOr<TransferStats> CopySequence(const SequenceRef& src,
                                           const SequenceRef& dst, int tokens);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_KV_TRANSFER_H_
