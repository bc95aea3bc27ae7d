// A small deterministic random generator (SplitMix64) for model weights and
// the benchmark's dataset. Unlike the <random> distributions, its output is
// fixed by this file alone, so a seed names the same weights and the same
// requests on every standard library.
//
// Thread-compatible: one instance per thread.
#ifndef DENSEGATE_RUNTIME_RANDOM_H_
#define DENSEGATE_RUNTIME_RANDOM_H_

#include <cmath>
#include <cstdint>

namespace densegate::runtime {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  // An independent stream for (seed, stream): weights of different tensors
  // do not depend on the order they are generated in.
  static Rng Stream(uint64_t seed, uint64_t stream) {
    Rng mixer(seed ^ (0x9E3779B97F4A7C15ull * (stream + 1)));
    return Rng(mixer.Next());
  }

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1p-53; }

  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }

  // Uniform integer in [lo, hi] (inclusive). Precondition: lo <= hi.
  int64_t UniformInt(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(Next() % span);
  }

  // Exponential with the given mean (inter-arrival times of a Poisson
  // process).
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }

 private:
  uint64_t state_;
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_RANDOM_H_
