#include "runtime/block_allocator.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"

namespace densegate::runtime {

BlockAllocator::BlockAllocator(int num_blocks, std::string what)
    : num_blocks_(std::max(num_blocks, 0)),
      what_(std::move(what)),
      used_(num_blocks_, false),
      num_free_(num_blocks_) {}

int BlockAllocator::num_free() const {
  absl::MutexLock lock(&mu_);
  return num_free_;
}

absl::Status BlockAllocator::TooLarge(int n) const {
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: a request needs %d blocks but the cache has only %d in total; "
      "give the cache more blocks or shorten the request",
      what_, n, num_blocks_));
}

std::vector<int32_t> BlockAllocator::TakeLocked(int n) {
  std::vector<int32_t> out;
  out.reserve(n);
  // First fit of a contiguous run.
  int run = 0;
  for (int b = 0; b < num_blocks_ && n > 0; ++b) {
    run = used_[b] ? 0 : run + 1;
    if (run == n) {
      for (int i = b - n + 1; i <= b; ++i) out.push_back(i);
      break;
    }
  }
  // Fragmented: the lowest free blocks.
  for (int b = 0; static_cast<int>(out.size()) < n; ++b) {
    if (!used_[b]) out.push_back(b);
  }
  for (int32_t b : out) used_[b] = true;
  num_free_ -= n;
  return out;
}

absl::StatusOr<std::vector<int32_t>> BlockAllocator::TryAllocate(int n) {
  if (n < 0) return absl::InvalidArgumentError("negative block count");
  if (n > num_blocks_) return TooLarge(n);
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::CancelledError(what_ + " is shut down");
  if (n > num_free_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %d blocks needed, %d free now", what_, n, num_free_));
  }
  return TakeLocked(n);
}

absl::StatusOr<std::vector<int32_t>> BlockAllocator::Allocate(int n) {
  if (n < 0) return absl::InvalidArgumentError("negative block count");
  if (n > num_blocks_) return TooLarge(n);
  absl::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutdown_ || (serving_ticket_ == ticket && num_free_ >= n);
  };
  mu_.Await(absl::Condition(&ready));
  ++serving_ticket_;
  if (shutdown_) return absl::CancelledError(what_ + " is shut down");
  return TakeLocked(n);
}

absl::Status BlockAllocator::Free(absl::Span<const int32_t> blocks) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<int32_t> seen;
  for (int32_t b : blocks) {
    if (b < 0 || b >= num_blocks_ || !used_[b] || !seen.insert(b).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: cannot free block %d: %s", what_, b,
                          (b < 0 || b >= num_blocks_) ? "out of range"
                          : !used_[b]                 ? "not allocated"
                                                      : "listed twice"));
    }
  }
  for (int32_t b : blocks) used_[b] = false;
  num_free_ += static_cast<int>(blocks.size());
  return absl::OkStatus();
}

void BlockAllocator::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

}  // namespace densegate::runtime
