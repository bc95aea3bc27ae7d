#include "cli/terminal_progress.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"

namespace densegate::cli {

void TerminalProgress::OnStage(const v1::Stage& s) {
  std::string name = absl::AsciiStrToLower(v1::StageKind_Name(s.kind()));
  if (s.status() == v1::STAGE_RUNNING) {
    Line(absl::StrFormat("[%s] running", name));
    return;
  }
  std::string status = absl::AsciiStrToLower(v1::StageStatus_Name(s.status()).substr(6));
  Line(absl::StrFormat("[%s] %s in %.1f s: %s", name, status, s.seconds(),
                       s.summary().substr(0, 300)));
}

void TerminalProgress::OnProgress(const v1::Progress& p) {
  std::string text =
      p.repetitions_planned() > 0 && p.message().empty()
          ? absl::StrFormat("  %s repetition %d/%d, %s pair ratio %.3fx",
                            absl::AsciiStrToLower(v1::StageKind_Name(p.stage())), p.repetition(),
                            p.repetitions_planned(), p.metric(), p.current_estimate())
          : "  " + p.message();
  if (isatty(2)) {
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    pending_ = true;
  } else {
    Line(text);
  }
}

void TerminalProgress::Line(const std::string& text) {
  if (pending_) std::fprintf(stderr, "\n");
  pending_ = false;
  std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace densegate::cli
