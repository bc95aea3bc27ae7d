// The state behind a bubblewrap sandbox: a shared sandbox's namespaces,
// held by its holder process, and what one confined command's child needs,
// prepared before fork. Private to platform/process.
//
// Thread-safety: not thread-safe; the launcher guards its SharedSandbox map
// with its mutex, and a PreparedSandbox belongs to one Spawn.
#ifndef DENSEGATE_PLATFORM_PROCESS_INTERNAL_SANDBOX_H_
#define DENSEGATE_PLATFORM_PROCESS_INTERNAL_SANDBOX_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace densegate::platform::internal {

// How a shared sandbox (Confinement::sandbox) persists: a "holder" bwrap
// creates the user and PID namespaces and sleeps in them; each command's
// bwrap joins them (--userns/--userns2/--pidns) and the sandbox's network
// namespace, and mounts its own view. Daemons a command leaves behind are
// reparented to the holder's PID 1; killing the holder ends the namespace
// and everything in it.
struct SharedSandbox {
  uint32_t uid = 0;
  uint32_t gid = 0;
  pid_t holder = -1;  // The holder's outer bwrap, our child.
  int holder_pidfd = -1;
  int init_pidfd = -1;    // PID 1 of its PID namespace.
  int outer_userns = -1;  // Owns the PID namespace: commands set up in it,
  int inner_userns = -1;  // then run in this one, without capabilities.
  int pidns = -1;
  int netns = -1;

  bool Alive() const;
  // Kills the holder and waits until every process of the namespace is gone.
  void End();
};

// What a confined command's child needs, prepared before fork.
struct PreparedSandbox {
  std::vector<std::string> args;  // bwrap's arguments, up to "--".
  // (child fd, parent fd) pairs: the shared sandbox's namespaces, the
  // seccomp program, the ready pipe (at ready_high).
  std::vector<std::pair<int, int>> fds;
  int netns = -1;  // Entered before bwrap runs; -1: bwrap makes its own.
  int seccomp_fd = -1;
  int ready[2] = {-1, -1};
  int ready_high = -1;     // Where the child first places ready[1].
  std::vector<int> owned;  // Closed by the parent after fork.
  // bwrap runs as the arm's user, which may not reach a path to bind (a
  // node's workspace under /root): the child, still root, binds each path
  // onto staging/<i> in a mount namespace of its own, and bwrap binds from
  // there. On the host the staging entries stay empty.
  std::string staging;
  std::vector<std::pair<std::string, std::string>> stage;  // (path, staging/<i>)

  PreparedSandbox() = default;
  PreparedSandbox(const PreparedSandbox&) = delete;
  PreparedSandbox& operator=(const PreparedSandbox&) = delete;
  ~PreparedSandbox();
};

}  // namespace densegate::platform::internal

#endif  // DENSEGATE_PLATFORM_PROCESS_INTERNAL_SANDBOX_H_
