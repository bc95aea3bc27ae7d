// Live progress of one evaluation on stderr, for `densegate eval` (from the
// harness directly) and `densegate submit --wait` / `watch` (from the
// scheduler's event stream): one line per finished stage, and a progress
// line (stage, repetition i/n, current estimate) rewritten in place when
// stderr is a terminal.
//
// Thread-compatible.
#ifndef DENSEGATE_CLI_TERMINAL_PROGRESS_H_
#define DENSEGATE_CLI_TERMINAL_PROGRESS_H_

#include <string>

#include "harness/evaluator.h"
#include "proto/densegate.pb.h"

namespace densegate::cli {

class TerminalProgress : public harness::EvalListener {
 public:
  void OnStage(const v1::Stage& stage) override;
  void OnProgress(const v1::Progress& progress) override;
  // A whole line, e.g. "state: running".
  void Line(const std::string& text);

 private:
  bool pending_ = false;  // A rewritable progress line is on screen.
};

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_TERMINAL_PROGRESS_H_
