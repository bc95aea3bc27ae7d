#include "harness/process/machine_probe.h"

#include <pthread.h>
#include <sched.h>

#include <ctime>
#include <utility>
#include <vector>

namespace densegate::harness {
namespace {

constexpr int kFloats = 64 * 1024;  // 256 KiB.
constexpr int kSweeps = 1000;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

class CacheSweepProbe : public MachineProbe {
 public:
  explicit CacheSweepProbe(std::vector<int> cpus)
      : cpus_(std::move(cpus)), data_(kFloats, 1.0f) {}

  double Seconds() override {
    cpu_set_t saved;
    const bool pin = !cpus_.empty() &&
                     pthread_getaffinity_np(pthread_self(), sizeof(saved), &saved) == 0;
    if (pin) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus_) CPU_SET(c, &set);
      pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    }
    // On this thread's CPU clock: time the thread spends preempted by other
    // threads of the node (heartbeats, RPCs) is not the machine's speed.
    // Long enough (~5 ms) that sub-millisecond flickers average out; the
    // slow state that matters lasts seconds.
    const double start = ThreadCpuSeconds();
    float* p = data_.data();
    for (int s = 0; s < kSweeps; ++s) {
      for (int i = 0; i < kFloats; ++i) p[i] = p[i] * 0.999f + 1e-3f;
      // Keeps the sweeps from being merged or dropped.
      asm volatile("" : : "r"(p) : "memory");
    }
    const double seconds = ThreadCpuSeconds() - start;
    if (pin) pthread_setaffinity_np(pthread_self(), sizeof(saved), &saved);
    return seconds;
  }

 private:
  std::vector<int> cpus_;
  std::vector<float> data_;
};

}  // namespace

std::unique_ptr<MachineProbe> NewCacheSweepProbe(std::vector<int> cpus) {
  return std::make_unique<CacheSweepProbe>(std::move(cpus));
}

}  // namespace densegate::harness
