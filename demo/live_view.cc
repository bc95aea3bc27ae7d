// Following each candidate (its events, then its merge) and drawing the
// live view.
#include "demo/internal/demo_run.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "demo/expectation.h"
#include "demo/scenario.h"
#include "demo/scratch_repo.h"
#include "platform/process/service_process.h"
#include "grpcpp/grpcpp.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.grpc.pb.h"
#include "manifest/manifest.h"
#include "results/report/report.h"
#include "results/store/store.h"
#include "scheduler/tokens.h"

namespace densegate::demo::internal {

namespace fs = std::filesystem;

absl::StatusOr<v1::Evaluation> Demo::Get(const std::string& id) {
  grpc::ClientContext ctx;
  Attach(&ctx, tokens_.viewer);
  v1::GetEvaluationRequest req;
  req.set_id(id);
  v1::Evaluation e;
  grpc::Status s = stub_->GetEvaluation(&ctx, req, &e);
  if (!s.ok()) return absl::UnavailableError(s.error_message());
  return e;
}

std::string StageName(v1::StageKind k) {
  std::string s = absl::AsciiStrToLower(v1::StageKind_Name(k));
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

// Streams one evaluation's events into the row until it ends.
void Demo::FollowEvents(Row* row, const std::string& id, const std::string& prefix) {
  grpc::ClientContext ctx;
  Attach(&ctx, tokens_.viewer, 0);
  v1::WatchEvaluationRequest req;
  req.set_id(id);
  std::unique_ptr<grpc::ClientReader<v1::EvaluationEvent>> reader = stub_->WatchEvaluation(&ctx, req);
  v1::EvaluationEvent ev;
  while (reader->Read(&ev)) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ev.has_stage()) {
      const v1::Stage& st = ev.stage();
      if (st.status() == v1::STAGE_RUNNING) {
        row->SetActivity(prefix + StageName(st.kind()));
      } else if (st.status() == v1::STAGE_FAILED) {
        row->SetActivity(prefix + StageName(st.kind()) + " failed");
      }
    } else if (ev.has_progress()) {
      const v1::Progress& p = ev.progress();
      std::string text = prefix + StageName(p.stage());
      if (p.repetitions_planned() > 0) {
        absl::StrAppendFormat(&text, " %d/%d", p.repetition(), p.repetitions_planned());
      }
      if (p.current_estimate() > 0) absl::StrAppendFormat(&text, " %.2fx", p.current_estimate());
      if (!p.metric().empty()) absl::StrAppend(&text, " ", p.metric());
      if (!p.message().empty()) absl::StrAppend(&text, ": ", p.message());
      row->SetActivity(text);
    } else if (ev.event_case() == v1::EvaluationEvent::kState && prefix.empty()) {
      row->state = ev.state();
      if (ev.state() == v1::RUNNING) row->SetActivity("starting");
    }
  }
  reader->Finish();
}

void Demo::Follow(Row* row) {
  FollowEvents(row, row->id, "");
  // Noise may leave it inconclusive: then its second part, on a calm node,
  // decides (v1::Evaluation::continued_by).
  for (absl::StatusOr<v1::Evaluation> e = Get(row->id);
       !giving_up_ && e.ok() && !e->continued_by().empty(); e = Get(row->id)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      row->id = row->watched_id = e->continued_by();
      row->node_id.clear();
    }
    FollowEvents(row, row->id, "second part: ");
  }
  // Then the merge queue: it may re-measure against a moved tip first.
  std::string followed_remeasure;
  while (!giving_up_) {
    absl::StatusOr<v1::Evaluation> e = Get(row->id);
    if (e.ok()) {
      const v1::MergeState m = e->merge().state();
      const bool final_state = e->state() == v1::FINISHED || e->state() == v1::CANCELLED ||
                               e->state() == v1::DEAD;
      const bool settled = final_state && m != v1::MERGE_QUEUED && m != v1::REMEASURING;
      std::optional<v1::Evaluation> remeasure;
      if (settled && !e->merge().remeasure_evaluation_id().empty()) {
        absl::StatusOr<v1::Evaluation> re = Get(e->merge().remeasure_evaluation_id());
        if (!re.ok()) {  // Asked again below: the verdict table needs it.
          absl::SleepFor(absl::Milliseconds(500));
          continue;
        }
        remeasure = std::move(*re);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        row->state = e->state();
        if (row->watched_id == row->id) row->node_id = e->node_id();
        if (settled) {
          row->remeasure = std::move(remeasure);
          row->final = *e;
          row->settled = true;
          row->SetActivity("done");
          return;
        }
        if (m == v1::MERGE_QUEUED) row->SetActivity("accepted; merge queued");
      }
      const std::string& re = e->merge().remeasure_evaluation_id();
      if (m == v1::REMEASURING && !re.empty() && re != followed_remeasure) {
        followed_remeasure = re;
        {
          std::lock_guard<std::mutex> lock(mu_);
          row->watched_id = re;
          row->node_id.clear();  // Until the live view finds where it runs.
        }
        FollowEvents(row, re, "re-measure on the new tip: ");
        continue;
      }
    }
    absl::SleepFor(absl::Milliseconds(500));
  }
}

std::string Demo::NodeName(const std::string& id) {
  auto it = node_names_.find(id);
  return it == node_names_.end() ? id.substr(0, 8) : it->second;
}

std::string DecisionText(const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED) return absl::AsciiStrToLower(v1::EvaluationState_Name(e.state()));
  std::string text = absl::AsciiStrToLower(v1::Decision_Name(e.verdict().decision()));
  for (const v1::Reason& r : e.verdict().reasons()) {
    if (r.code() != v1::VERIFIED && r.code() != v1::REASON_CODE_UNSPECIFIED) {
      absl::StrAppend(&text, " (", absl::AsciiStrToLower(v1::ReasonCode_Name(r.code())), ")");
      break;
    }
  }
  return text;
}

void Demo::Show(bool final) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> lines;
  // Per row, the activities that another replaced before this redraw.
  std::vector<std::vector<std::string>> replaced(rows_.size());
  for (size_t i = 0; i < rows_.size(); ++i) {
    Row& r = *rows_[i];
    const std::string where = r.node_id.empty() ? "" : NodeName(r.node_id);
    auto line = [&](const std::string& what) {
      return absl::StrFormat("  %-24s %-7s %s", r.candidate->name, where, what);
    };
    for (size_t k = 0; k + 1 < r.unshown.size(); ++k) replaced[i].push_back(line(r.unshown[k]));
    r.unshown.clear();
    std::string what = r.settled ? DecisionText(r.final) : r.activity;
    if (r.settled && r.final.merge().state() == v1::MERGED) what += ", merged";
    lines.push_back(line(what));
  }
  if (tty_) {
    if (shown_lines_ > 0) out_ << "\x1b[" << shown_lines_ << "A";
    out_ << "\x1b[K" << Elapsed(start_) << (final ? " all decided" : " running") << "\n";
    for (const std::string& l : lines) out_ << "\x1b[K" << l << "\n";
    shown_lines_ = static_cast<int>(lines.size()) + 1;
  } else {
    // A log: one line per change, none skipped.
    for (size_t i = 0; i < rows_.size(); ++i) {
      std::string& last = last_printed_[rows_[i].get()];
      replaced[i].push_back(lines[i]);
      for (const std::string& l : replaced[i]) {
        if (last == l) continue;
        last = l;
        out_ << Elapsed(start_) << l << "\n";
      }
    }
  }
  out_.flush();
}

bool Demo::WaitAndShow() {
  std::vector<std::thread> watchers;
  for (auto& r : rows_) watchers.emplace_back(&Demo::Follow, this, r.get());
  bool all = false;
  const absl::Time deadline = start_ + o_.timeout;
  while (!all && absl::Now() < deadline) {
    bool decided = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      all = std::all_of(rows_.begin(), rows_.end(), [](const auto& r) { return r->settled; });
      decided = std::all_of(rows_.begin(), rows_.end(), [](const auto& r) {
        return r->state == v1::FINISHED || r->state == v1::CANCELLED || r->state == v1::DEAD;
      });
    }
    if (decided) StartBisect();
    // Which node holds each running candidate (not part of the event stream).
    std::vector<std::pair<Row*, std::string>> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& r : rows_) {
        if (!r->settled && (r->state == v1::RUNNING || r->watched_id != r->id)) {
          running.push_back({r.get(), r->watched_id});
        }
      }
    }
    for (auto& [row, id] : running) {
      absl::StatusOr<v1::Evaluation> e = Get(id);
      std::lock_guard<std::mutex> lock(mu_);
      if (e.ok() && row->watched_id == id) row->node_id = e->node_id();
    }
    Show(all);
    if (!all) absl::SleepFor(absl::Seconds(1));
  }
  if (!all) {
    // Watchers block on streams of a scheduler that is about to stop.
    giving_up_ = true;
    for (auto& n : nodes_) n->Stop(absl::Seconds(1));
    scheduler_->Stop(absl::Seconds(1));
  }
  for (std::thread& t : watchers) t.join();
  return all;
}

}  // namespace densegate::demo::internal
