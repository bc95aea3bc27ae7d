// What `densegate version` reports; generated at build time (see BUILD).
#ifndef DENSEGATE_CLI_BUILD_INFO_H_
#define DENSEGATE_CLI_BUILD_INFO_H_

namespace densegate::cli {

extern const char kVersion[];
// Commit of the source tree, with "-dirty" when it had local changes.
extern const char kGitCommit[];
// Compilation mode, sanitizers, compiler and language standard.
extern const char kBuildFlags[];

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_BUILD_INFO_H_
