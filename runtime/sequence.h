// A request in flight inside the engine: the request, its encoded prompt,
// how far prefill got, where its cache lives, and what it generated.
// Internal to runtime/. Owned by exactly one stage at a time (moved between
// stages as a unique_ptr), so it needs no lock.
#ifndef DENSEGATE_RUNTIME_SEQUENCE_H_
#define DENSEGATE_RUNTIME_SEQUENCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "runtime/hybrid_model.h"
#include "runtime/pool_cache.h"
#include "runtime/request.h"

namespace densegate::runtime {

struct Sequence {
  Request request;
  std::vector<float> embeddings;  // [prompt][hidden], from encode.
  int prefilled = 0;              // Prompt tokens run so far.
  Residency residency;
  std::vector<int32_t> tokens;  // Generated.
  std::vector<int64_t> token_times_ns;
  int64_t queued_ns = 0;  // When it entered its current queue.

  int prompt_len() const { return static_cast<int>(request.prompt.size()); }
  // Positions whose K/V are ever stored: the last generated token is never
  // fed back.
  int cached_tokens() const {
    return prompt_len() + request.max_new_tokens - 1;
  }
  bool done() const {
    return static_cast<int>(tokens.size()) >= request.max_new_tokens;
  }
  // The next decode step's input. Precondition: at least one token.
  DecodeRow NextRow() const {
    return DecodeRow{tokens.back(),
                     prompt_len() + static_cast<int>(tokens.size()) - 1,
                     residency.blocks, residency.slot};
  }
};

// Ends a sequence: releases its cache and reports its result.
using FinishFn = std::function<void(std::unique_ptr<Sequence>, absl::Status)>;

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_SEQUENCE_H_
