#include "harness/node/evaluator_job_runner.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "harness/process/host_lock.h"
#include "harness/process/machine_probe.h"
#include "results/feedback/bundle.h"

namespace densegate::harness {
namespace {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (absl::StartsWith(line, "model name")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

int64_t MemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  in >> key >> kb;
  return kb * 1024;
}

}  // namespace

v1::NodeDimensions DetectDimensions(const std::vector<int>& cpus) {
  v1::NodeDimensions d;
  d.set_accelerator_kind("cpu");
  d.set_cpu_model(CpuModel());
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  d.set_cpu_cores(cpus.empty() ? cores : static_cast<int>(cpus.size()));
  d.set_memory_bytes(MemoryBytes());
  utsname u{};
  uname(&u);
  d.set_fingerprint(absl::StrFormat(
      "%016x", std::hash<std::string>{}(absl::StrCat(d.cpu_model(), "|", u.release, "|",
                                                     u.machine, "|gcc-" __VERSION__))));
  return d;
}

double MeasureCalibrationNoise(int runs) {
  // A fixed mix of arithmetic and memory traffic, like the benchmarks
  // (~20 ms per run).
  std::vector<double> a(1 << 21, 1.0);
  std::vector<double> t;
  volatile double sink = 0;
  for (int r = 0; r < runs + 2; ++r) {
    auto start = std::chrono::steady_clock::now();
    double acc = 0;
    for (int pass = 0; pass < 6; ++pass) {
      for (size_t i = 0; i < a.size(); ++i) {
        a[i] = a[i] * 0.999999 + 1e-6;
        acc += a[i];
      }
    }
    sink = sink + acc;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r >= 2) t.push_back(s);  // The first two warm up caches and clocks.
  }
  // Robust coefficient of variation: 1.4826 * MAD / median, so that one
  // preempted run does not quarantine a node, while sustained noise does.
  std::sort(t.begin(), t.end());
  const double median = t[t.size() / 2];
  std::vector<double> dev;
  for (double x : t) dev.push_back(std::abs(x - median));
  std::sort(dev.begin(), dev.end());
  return 1.4826 * dev[dev.size() / 2] / median;
}

EvaluatorJobRunner::EvaluatorJobRunner(EvaluatorOptions evaluator, int64_t precision_cache_bytes,
                                       platform::ProcessLauncher* launcher)
    : options_(std::move(evaluator)),
      launcher_(launcher),
      precision_baselines_(precision_cache_bytes) {
  // What the node registers with; the same for every evaluation.
  options_.node_fingerprint = DetectDimensions(options_.cpus).fingerprint();
  // Bundles a node killed mid-evaluation left behind.
  std::error_code ec;
  if (!options_.workspace_root.empty()) {
    std::filesystem::remove_all(options_.workspace_root + "/feedback", ec);
  }
}

v1::NodeDimensions EvaluatorJobRunner::Dimensions() { return DetectDimensions(options_.cpus); }

double EvaluatorJobRunner::MeasureNoise() {
  HostLock::Guard measuring(options_.host_lock, HostLock::Mode::kExclusive);
  return MeasureCalibrationNoise(15);
}

absl::StatusOr<EvalOutcome> EvaluatorJobRunner::Evaluate(const std::string& node_id,
                                                         const EvalRequest& request,
                                                         int64_t feedback_max_bytes,
                                                         EvalListener* listener) {
  EvaluatorOptions options = options_;
  options.node_id = node_id;
  options.precision_baselines = &precision_baselines_;
  std::unique_ptr<MachineProbe> probe = NewCacheSweepProbe(options_.cpus);
  options.machine_probe = probe.get();
  // The bundle is written to a directory of its own, read back, and
  // removed: the node keeps nothing of it once it is uploaded.
  // Without a directory (a full disk) the evaluation goes on without a
  // bundle: the feedback is lost, never the verdict.
  std::error_code ec;
  std::string dir;
  if (!options_.workspace_root.empty()) {
    std::filesystem::create_directories(options_.workspace_root + "/feedback", ec);
    dir = options_.workspace_root + "/feedback/bundle-XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) dir.clear();
  }
  if (dir.empty()) {
    std::cerr << "node: no feedback bundle: cannot create a directory under "
              << options_.workspace_root << "/feedback\n";
  }
  EvalRequest with_bundle = request;
  with_bundle.out_dir = dir;
  Evaluator evaluator(options, launcher_);
  absl::StatusOr<EvalOutcome> outcome = evaluator.Evaluate(with_bundle, listener);
  if (outcome.ok() && !dir.empty()) {
    absl::StatusOr<v1::FeedbackBundle> bundle = results::ReadBundleDir(dir, feedback_max_bytes);
    if (bundle.ok()) outcome->feedback = *std::move(bundle);
  }
  if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  return outcome;
}

}  // namespace densegate::harness
