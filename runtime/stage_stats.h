// Per-stage counters of the runtime: where the time went (queues, encode,
// prefill, transfer, decode steps, and inside the model: KDA, attention,
// MLP, GEMM, the LM head) and how much moved (steps, rows, transfer bytes).
// The serving benchmark prints them; a regression shows up as the counter
// that grew.
//
// Time counters are nanoseconds summed over all threads (two threads busy
// for 1 s add 2 s). "Of which" counters overlap their parents:
//   kda_ns, attention_ns, mlp_ns, lm_head_ns   disjoint model parts
//   gemm_ns       GEMM calls inside any of them
//   kda_kernel_ns KdaDecode / KdaPrefill calls inside kda_ns
//   kv_cache_ns   KV-cache writes and reads inside attention_ns
//
// Thread-safe (relaxed atomics).
#ifndef DENSEGATE_RUNTIME_STAGE_STATS_H_
#define DENSEGATE_RUNTIME_STAGE_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace densegate::runtime {

struct StageStats {
  // Stages.
  std::atomic<int64_t> queue_ns{0};  // Requests waiting between stages.
  std::atomic<int64_t> encode_ns{0};
  std::atomic<int64_t> prefill_ns{0};
  std::atomic<int64_t> transfer_ns{0};
  std::atomic<int64_t> decode_ns{0};  // Decode steps, whole.
  // Model parts (prefill and decode together).
  std::atomic<int64_t> kda_ns{0};
  std::atomic<int64_t> attention_ns{0};
  std::atomic<int64_t> mlp_ns{0};
  std::atomic<int64_t> lm_head_ns{0};
  std::atomic<int64_t> gemm_ns{0};
  std::atomic<int64_t> kda_kernel_ns{0};
  std::atomic<int64_t> kv_cache_ns{0};
  // Volumes.
  std::atomic<int64_t> prefill_chunks{0};
  std::atomic<int64_t> prefill_tokens{0};
  std::atomic<int64_t> decode_steps{0};
  std::atomic<int64_t> decode_rows{0};  // Sum of batch sizes.
  std::atomic<int64_t> transfers{0};
  std::atomic<int64_t> transfer_bytes{0};
  std::atomic<int64_t> transfer_runs{0};  // memcpy calls for KV blocks.
  std::atomic<int64_t> transfer_blocks{0};

  // (name, value) of every counter, in declaration order.
  std::vector<std::pair<std::string, int64_t>> Snapshot() const;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_STAGE_STATS_H_
