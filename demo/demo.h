// `densegate demo`: the whole loop on one machine. Builds a scratch target
// repository from this checkout's workload at the scenario's first version
// (scratch_repo.h), starts a scheduler on the embedded SQLite store and two
// node workers (separate processes on loopback, each pinned to its own
// CPUs), submits every candidate of the scenario at once (scenario.h),
// shows each one's stage, node and repetitions live, then prints the
// verdict table, writes the regression report and says whether every
// candidate got the decision it should.
//
// Thread-compatible: RunDemo is called once, from main's thread; it starts
// one watcher thread per candidate.
#ifndef DENSEGATE_DEMO_DEMO_H_
#define DENSEGATE_DEMO_DEMO_H_

#include <ostream>
#include <string>

#include "absl/time/time.h"

namespace densegate::demo {

struct DemoOptions {
  // The `densegate` binary started as scheduler and nodes.
  std::string densegate_binary;
  // densegate checkout holding the workload and examples/.
  std::string source_root;
  // Store, tokens, logs and the report (created; the store is new each run).
  std::string out_dir;
  // Scratch repository and node workspaces, kept between runs so that the
  // workload's Bazel caches make the second run fast.
  std::string cache_dir;
  // Fewer pairs and a smaller serving run (examples/workload/quick.json):
  // same decisions.
  bool quick = false;
  // A candidate that should be accepted but whose evaluation (or re-measure
  // against the moved tip) ends inconclusive is listed as such and not
  // counted as a miss. A wrong accept or reject still is. For CI on shared
  // machines, where a 2% no-slowdown bound is not always provable within
  // the pair budget.
  bool allow_inconclusive = false;
  // Only create the scratch repository (checks that every patch applies).
  bool prepare_only = false;
  // Nodes run every arm's commands as their own user, without the sandbox
  // (`densegate node --unsafe_no_sandbox`): for machines that cannot run
  // bubblewrap, and to measure what the sandbox itself costs. Development
  // only; every verdict says so.
  bool unsafe_no_sandbox = false;
  // Gives up (exit 4) when the candidates are not all decided by then.
  absl::Duration timeout = absl::Minutes(60);
};

// Exit code: 0 when every candidate got its expected decision (and merge),
// or, with allow_inconclusive, when the only misses are inconclusive
// measurements; 1 when one did not, 2 for bad options or scenario, 4 for infrastructure
// failures (a service that would not start, the timeout).
int RunDemo(const DemoOptions& options, std::ostream& out);

}  // namespace densegate::demo

#endif  // DENSEGATE_DEMO_DEMO_H_
