#include "harness/runner/inputs.h"

#include <cmath>
#include <random>

namespace densegate::harness {

namespace {

// xoshiro256+ (Blackman and Vigna): fast, and plenty for test inputs; the
// seed is what must be unpredictable, not the stream.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& w : s_) w = SplitMix(&seed);
  }
  uint64_t Next() {
    const uint64_t result = s_[0] + s_[3];
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = (s_[3] << 45) | (s_[3] >> 19);
    return result;
  }
  // Uniform in (0, 1).
  double Uniform() { return ((Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normals, two at a time (Box-Muller).
  void Normals(double* a, double* b) {
    const double r = std::sqrt(-2.0 * std::log(Uniform()));
    const double t = 6.283185307179586 * Uniform();
    *a = r * std::cos(t);
    *b = r * std::sin(t);
  }

 private:
  static uint64_t SplitMix(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

// Fills `v` with f(z), z ~ N(0, 1).
template <typename F>
void FillNormal(Rng& rng, std::vector<float>& v, F f) {
  size_t i = 0;
  double a, b;
  for (; i + 1 < v.size(); i += 2) {
    rng.Normals(&a, &b);
    v[i] = static_cast<float>(f(a));
    v[i + 1] = static_cast<float>(f(b));
  }
  if (i < v.size()) {
    rng.Normals(&a, &b);
    v[i] = static_cast<float>(f(a));
  }
}

}  // namespace

absl::Status DrawInputs(const RunnerLayout& layout, uint64_t seed,
                        std::vector<std::vector<float>>* values) {
  values->clear();
  Rng rng(seed);
  for (const RunnerBuffer& b : layout.buffers) {
    values->emplace_back();
    if (b.role == BufferRole::kOutput) continue;
    std::vector<float>& v = values->back();
    v.resize(b.count);
    const std::string dist = b.init.is_object() ? b.init.value("dist", "") : "";
    if (dist == "normal") {
      const double scale = b.init.value("scale", 1.0);
      FillNormal(rng, v, [scale](double z) { return scale * z; });
    } else if (dist == "uniform") {
      const double lo = b.init.value("lo", 0.0), hi = b.init.value("hi", 1.0);
      for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.Uniform());
    } else if (dist == "log_decay") {
      const double s = b.init.value("gate_scale", 1.0);
      if (!(s > 0)) return absl::InvalidArgumentError("log_decay needs gate_scale > 0");
      // logsigmoid(z) = -log1p(exp(-z)).
      FillNormal(rng, v, [s](double z) { return -std::log1p(std::exp(-z)) / s; });
    } else if (dist == "sigmoid_normal") {
      FillNormal(rng, v, [](double z) { return 1.0 / (1.0 + std::exp(-z)); });
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
