// MachineProbe: a fixed piece of work the harness times right before each
// measured process of a benchmark pair and after each benchmark's two, to
// tell whether the machine itself changed speed during the pair.
//
// Why: on shared hosts (VMs) the memory system of a vCPU switches between
// states for seconds to minutes at a time, whatever runs inside the guest.
// Measured on the 2-core VM this project is developed on: a single-thread
// KDA decode benchmark ran at 180-190 us or at 330-360 us (1.8x) for whole
// minutes, and a 256 KiB read-modify-write sweep (this probe) took 1.85x its
// best time in the slow state and 1.05x (median) in the fast one, while a
// register-only FMA loop did not move at all. A pair whose two arms ran in
// different states gives a ratio off by up to 1.8x in either direction; a
// pair measured wholly in one state does not. The probe does not look at
// anything the candidate or the baseline computes, so discarding a pair on
// its word cannot favour either arm.
//
// Thread-compatible: one caller at a time per probe.
#ifndef DENSEGATE_HARNESS_PROCESS_MACHINE_PROBE_H_
#define DENSEGATE_HARNESS_PROCESS_MACHINE_PROBE_H_

#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace densegate::harness {

class MachineProbe {
 public:
  virtual ~MachineProbe() = default;
  // Seconds the probe's fixed work took just now.
  virtual double Seconds() = 0;
  // Lets the host settle for `d` between reads (the evaluator's wait for an
  // unsteady host); a test's probe returns at once.
  virtual void Pause(absl::Duration d) { absl::SleepFor(d); }
};

// 1000 read-modify-write sweeps over a 256 KiB float array (~5 ms on the
// machine above, within 5% from call to call in its fast state), timed on
// the calling thread's CPU clock and run on `cpus` (the CPUs the measured
// processes are pinned to; empty: wherever the thread runs).
std::unique_ptr<MachineProbe> NewCacheSweepProbe(std::vector<int> cpus);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_PROCESS_MACHINE_PROBE_H_
