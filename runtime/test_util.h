// Helpers shared by the runtime's tests: the tiny model of
// runtime/configs/tiny.json, random prompts, and a single-sequence
// reference generator (prefill in aligned chunks, then greedy decode at
// batch 1) that engine results are compared with.
//
// Thread-compatible; test-only.
#ifndef DENSEGATE_RUNTIME_TEST_UTIL_H_
#define DENSEGATE_RUNTIME_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kvcache/kv_quant.h"
#include "runtime/hybrid_model.h"
#include "runtime/model_config.h"

namespace densegate::runtime::testing {

// runtime/configs/tiny.json (tests run from the workspace root).
ModelConfig TinyConfig();
std::unique_ptr<HybridModel> TinyModel(const ModelOptions& options = {});

std::vector<int32_t> RandomPrompt(int length, uint64_t seed, int vocab);

struct Generation {
  std::vector<int32_t> tokens;
  // Logits before each generated token ([max_new][vocab]).
  std::vector<std::vector<float>> logits;
};

// Greedy generation of one sequence in its own caches: prefill in chunks
// of `chunk` tokens (a multiple of kPrefillAlignment), then batch-1 decode.
// With `forced`, decode feeds forced[i] after step i instead of the sampled
// token (teacher forcing; `tokens` still holds the argmaxes).
absl::StatusOr<Generation> GenerateAlone(
    const HybridModel& model, const std::vector<int32_t>& prompt,
    int max_new_tokens, kernels::KvFormat format = kernels::KvFormat::kFp32,
    int chunk = 4 * kPrefillAlignment,
    const std::vector<int32_t>* forced = nullptr);

}  // namespace densegate::runtime::testing

#endif  // DENSEGATE_RUNTIME_TEST_UTIL_H_
