#include "runtime/request.h"

#include "absl/strings/str_format.h"

namespace densegate::runtime {

absl::Status ValidateRequest(const Request& r, const ModelConfig& config) {
  if (r.prompt.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %d: field 'prompt' is empty (at least one token needed)",
        r.id));
  }
  if (r.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request %d: field 'max_new_tokens' must be >= 1, found %d", r.id,
        r.max_new_tokens));
  }
  const int64_t total =
      static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  if (total > config.max_context) {
    return absl::OutOfRangeError(absl::StrFormat(
        "request %d: prompt length %d + max_new_tokens %d = %d exceeds the "
        "model's max_context %d",
        r.id, r.prompt.size(), r.max_new_tokens, total, config.max_context));
  }
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "request %d: field 'prompt[%d]' = %d is outside the vocabulary "
          "[0, %d)",
          r.id, i, r.prompt[i], config.vocab_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace densegate::runtime
