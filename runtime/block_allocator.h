// Hands out fixed-size blocks (indices in [0, num_blocks)) of a paged cache.
// An allocation is all-or-nothing; it takes the first run of n consecutive
// free blocks when there is one (so a transfer can copy it in one piece),
// else the lowest-numbered free blocks. A caller that cannot get its blocks
// either fails at once (TryAllocate) or waits for others to free theirs
// (Allocate), first come first served; a request larger than the whole pool
// is rejected at once, never waits forever.
//
// Thread-safe. Free checks every index, so a double free or a foreign index
// is reported and changes nothing (it cannot hand one request's block to
// another).
#ifndef DENSEGATE_RUNTIME_BLOCK_ALLOCATOR_H_
#define DENSEGATE_RUNTIME_BLOCK_ALLOCATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace densegate::runtime {

class BlockAllocator {
 public:
  // `what` names the pool in error messages ("decode KV cache").
  BlockAllocator(int num_blocks, std::string what);
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // n blocks now, or ResourceExhausted (n > num_blocks says so explicitly).
  // n == 0 gives an empty list.
  absl::StatusOr<std::vector<int32_t>> TryAllocate(int n);

  // n blocks, waiting in FIFO order until enough are free. Fails at once
  // with ResourceExhausted when n > num_blocks, and with Cancelled once
  // Shutdown() is called.
  absl::StatusOr<std::vector<int32_t>> Allocate(int n);

  // Returns blocks to the pool. InvalidArgument (and nothing freed) if an
  // index is out of range, not allocated, or repeated.
  absl::Status Free(absl::Span<const int32_t> blocks);

  // Wakes every waiter with Cancelled; later Allocate calls fail too.
  void Shutdown();

  int num_blocks() const { return num_blocks_; }
  int num_free() const;

 private:
  std::vector<int32_t> TakeLocked(int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status TooLarge(int n) const;

  const int num_blocks_;
  const std::string what_;
  mutable absl::Mutex mu_;
  std::vector<bool> used_ ABSL_GUARDED_BY(mu_);
  int num_free_ ABSL_GUARDED_BY(mu_);
  // FIFO tickets of waiting Allocate calls.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t serving_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_BLOCK_ALLOCATOR_H_
