// What launcher.h declares besides the launcher itself.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "platform/process/launcher.h"

namespace densegate::platform {

std::string ProcessResult::Describe() const {
  if (!stopped.empty()) return absl::StrFormat("killed: %s, after %.1f s", stopped, wall_seconds);
  if (timed_out) {
    return absl::StrFormat("killed: wall timeout after %.1f s", wall_seconds);
  }
  if (term_signal != 0) {
    return absl::StrFormat("killed by signal %d (%s) after %.2f s", term_signal,
                           strsignal(term_signal), wall_seconds);
  }
  return absl::StrFormat("exited with %d after %.2f s", exit_code, wall_seconds);
}

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadOutputFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace densegate::platform
