#include "platform/process/internal/sandbox.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "platform/process/internal/linux.h"

namespace densegate::platform::internal {

bool SharedSandbox::Alive() const {
  pollfd p{holder_pidfd, POLLIN, 0};
  return holder_pidfd >= 0 && poll(&p, 1, 0) == 0;
}

void SharedSandbox::End() {
  if (holder > 0) {
    kill(holder, SIGKILL);
    while (waitpid(holder, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (init_pidfd >= 0) {
    // PID 1 exits only once the kernel has killed and reaped the rest.
    pollfd p{init_pidfd, POLLIN, 0};
    while (poll(&p, 1, 30000) < 0 && errno == EINTR) {
    }
  }
  holder = -1;
  for (int* fd : {&holder_pidfd, &init_pidfd, &outer_userns, &inner_userns, &pidns, &netns}) {
    CloseFd(*fd);
  }
}

PreparedSandbox::~PreparedSandbox() {
  if (!staging.empty()) RemoveTree(staging);
  for (int fd : owned) close(fd);
  if (ready[0] >= 0) close(ready[0]);
  if (ready[1] >= 0) close(ready[1]);
}

}  // namespace densegate::platform::internal
