#include "runtime/bench_dataset.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "runtime/random.h"

namespace densegate::runtime {

absl::StatusOr<std::vector<BenchRequest>> MakeRandomDataset(
    const DatasetOptions& o) {
  auto bad = [](const char* what, double value) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dataset option %s has a bad value: %g", what, value));
  };
  if (o.num_prompts < 1) return bad("num_prompts (>= 1)", o.num_prompts);
  if (o.input_len < 1) return bad("input_len (>= 1)", o.input_len);
  if (o.output_len < 1) return bad("output_len (>= 1)", o.output_len);
  if (!(o.range_ratio > 0 && o.range_ratio <= 1)) {
    return bad("range_ratio (in (0, 1])", o.range_ratio);
  }
  if (std::isnan(o.request_rate)) return bad("request_rate", o.request_rate);
  if (o.vocab_size < 1) return bad("vocab_size (>= 1)", o.vocab_size);

  Rng lengths = Rng::Stream(o.seed, 0);
  Rng tokens = Rng::Stream(o.seed, 1);
  Rng arrivals = Rng::Stream(o.seed, 2);
  const bool burst = o.request_rate <= 0 || std::isinf(o.request_rate);
  std::vector<BenchRequest> out(o.num_prompts);
  double t = 0;
  for (int i = 0; i < o.num_prompts; ++i) {
    auto draw = [&](int len) {
      const int lo = std::max(1, static_cast<int>(len * o.range_ratio));
      return static_cast<int>(lengths.UniformInt(lo, len));
    };
    BenchRequest& r = out[i];
    r.request.id = i;
    r.request.prompt.resize(draw(o.input_len));
    r.request.max_new_tokens = draw(o.output_len);
    for (int32_t& tok : r.request.prompt) {
      tok = static_cast<int32_t>(tokens.UniformInt(0, o.vocab_size - 1));
    }
    if (!burst) t += arrivals.Exponential(1.0 / o.request_rate);
    r.arrival_s = t;
  }
  return out;
}

}  // namespace densegate::runtime
