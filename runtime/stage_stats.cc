#include "runtime/stage_stats.h"

namespace densegate::runtime {

std::vector<std::pair<std::string, int64_t>> StageStats::Snapshot() const {
  return {
      {"queue_ns", queue_ns.load()},
      {"encode_ns", encode_ns.load()},
      {"prefill_ns", prefill_ns.load()},
      {"transfer_ns", transfer_ns.load()},
      {"decode_ns", decode_ns.load()},
      {"kda_ns", kda_ns.load()},
      {"attention_ns", attention_ns.load()},
      {"mlp_ns", mlp_ns.load()},
      {"lm_head_ns", lm_head_ns.load()},
      {"gemm_ns", gemm_ns.load()},
      {"kda_kernel_ns", kda_kernel_ns.load()},
      {"kv_cache_ns", kv_cache_ns.load()},
      {"prefill_chunks", prefill_chunks.load()},
      {"prefill_tokens", prefill_tokens.load()},
      {"decode_steps", decode_steps.load()},
      {"decode_rows", decode_rows.load()},
      {"transfers", transfers.load()},
      {"transfer_bytes", transfer_bytes.load()},
      {"transfer_runs", transfer_runs.load()},
      {"transfer_blocks", transfer_blocks.load()},
  };
}

}  // namespace densegate::runtime
