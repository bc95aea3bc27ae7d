// Helpers every test binary of densegate shares: its temporary directory
// and runfiles, small file reads and writes, a shell step that must succeed,
// and WaitFor, the one way a test waits for something another process does
// (instead of a fixed sleep).
//
// Thread-safety: free functions; WaitFor calls `done` on the caller's thread.
#ifndef DENSEGATE_TESTING_TEST_UTIL_H_
#define DENSEGATE_TESTING_TEST_UTIL_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace densegate::test {

// The test's private temporary directory (Bazel's TEST_TMPDIR).
std::string TestTmpDir();
// A file of the test's runfiles, by its path in the repository.
std::string Runfile(const std::string& path);
// The file's contents; empty when it cannot be read.
std::string ReadFile(const std::string& path);
// Writes `text` to `path`, creating its parent directories.
void WriteFile(const std::string& path, const std::string& text);
// Runs `command` with /bin/sh; a non-zero exit fails the test (fatally, in
// the calling function).
void Sh(const std::string& command);
// Calls `done` until it returns true or `timeout` has passed, pausing
// `poll` between calls; returns its last answer.
bool WaitFor(absl::FunctionRef<bool()> done, absl::Duration timeout,
             absl::Duration poll = absl::Milliseconds(50));

}  // namespace densegate::test

#endif  // DENSEGATE_TESTING_TEST_UTIL_H_
