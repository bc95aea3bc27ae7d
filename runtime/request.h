// What a client gives the engine (Request) and gets back (RequestResult,
// through a RequestObserver). Generation is greedy and runs for exactly
// max_new_tokens tokens (there is no end-of-sequence token).
//
// Plain value types; RequestObserver implementations must be thread-safe
// (the engine calls them from its worker threads).
#ifndef DENSEGATE_RUNTIME_REQUEST_H_
#define DENSEGATE_RUNTIME_REQUEST_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "runtime/model_config.h"

namespace densegate::runtime {

struct Request {
  int64_t id = 0;
  std::vector<int32_t> prompt;
  int max_new_tokens = 1;
  // When the request arrived (Clock time); < 0 means "when submitted".
  int64_t arrival_ns = -1;
};

struct RequestResult {
  int64_t id = 0;
  // OK, or why this request (and only it) failed.
  absl::Status status;
  int prompt_tokens = 0;
  std::vector<int32_t> tokens;          // Generated tokens.
  std::vector<int64_t> token_times_ns;  // When each was sampled.
  int64_t arrival_ns = 0;
  int64_t finish_ns = 0;
};

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  // Called exactly once per submitted request, from an engine thread.
  virtual void OnFinished(RequestResult result) = 0;
};

// Why `request` cannot run on a model with `config` (names the field:
// prompt, prompt[i], max_new_tokens), or OK.
absl::Status ValidateRequest(const Request& request, const ModelConfig& config);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_REQUEST_H_
