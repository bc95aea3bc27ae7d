#include "harness/runner/inputs.h"

#include <cmath>
#include <random>

namespace densegate::harness {

absl::Status DrawInputs(const RunnerLayout& layout, uint64_t seed,
                        std::vector<std::vector<float>>* values) {
  values->clear();
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  for (const RunnerBuffer& b : layout.buffers) {
    values->emplace_back();
    if (b.role == BufferRole::kOutput) continue;
    std::vector<float>& v = values->back();
    v.resize(b.count);
    const std::string dist = b.init.is_object() ? b.init.value("dist", "") : "";
    if (dist == "normal") {
      const double scale = b.init.value("scale", 1.0);
      for (float& x : v) x = static_cast<float>(scale * normal(rng));
    } else if (dist == "uniform") {
      std::uniform_real_distribution<double> u(b.init.value("lo", 0.0), b.init.value("hi", 1.0));
      for (float& x : v) x = static_cast<float>(u(rng));
    } else if (dist == "log_decay") {
      const double s = b.init.value("gate_scale", 1.0);
      if (!(s > 0)) return absl::InvalidArgumentError("log_decay needs gate_scale > 0");
      // logsigmoid(z) = -log1p(exp(-z)).
      for (float& x : v) x = static_cast<float>(-std::log1p(std::exp(-normal(rng))) / s);
    } else if (dist == "sigmoid_normal") {
      for (float& x : v) x = static_cast<float>(1.0 / (1.0 + std::exp(-normal(rng))));
    } else {
      return absl::InvalidArgumentError("buffer " + b.name + ": unknown init " + b.init.dump());
    }
  }
  return absl::OkStatus();
}

uint64_t HiddenSeed(uint64_t salt) {
  std::random_device rd;
  uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return s ^ (salt * 0x9E3779B97F4A7C15ull);
}

}  // namespace densegate::harness
