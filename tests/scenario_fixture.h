// The scheduler in this process for scenario tests: the server on loopback
// port 0 over the suite's store, and node workers on threads whose jobs a
// script answers (harness/node/testing/scripted_job_runner.h). Shared by
// scheduler_scenarios_test.cc and agent_campaign_test.cc.
#ifndef DENSEGATE_TESTS_SCENARIO_FIXTURE_H_
#define DENSEGATE_TESTS_SCENARIO_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpc/grpc.h"
#include "gtest/gtest.h"
#include "harness/node/node_worker.h"
#include "harness/node/testing/scripted_job_runner.h"
#include "platform/process/launcher.h"
#include "scheduler/server.h"
#include "tests/scheduler_fixture.h"

namespace densegate::test {

using harness::testing::ScriptedAnswer;
using harness::testing::ScriptedJobRunner;
using Script = ScriptedJobRunner::Script;

// gRPC stays initialized for the whole test binary: otherwise the last
// channel of each test shuts the library down, which waits seconds for its
// executor threads.
inline const bool kGrpcInitialized = (grpc_init(), true);

inline ScriptedAnswer Unchanged() { return {}; }
inline ScriptedAnswer CorrectnessFails() { return {.kind = ScriptedAnswer::Kind::kCorrectnessFails}; }
inline ScriptedAnswer Measured(double ratio) {
  return {.kind = ScriptedAnswer::Kind::kMeasured, .ratio = ratio};
}

// A node worker on a thread of its own; stopped and joined when destroyed.
class NodeThread {
 public:
  NodeThread(const std::string& server, const std::string& name, Script script,
             platform::ProcessLauncher* launcher)
      : runner_(std::move(script), launcher),
        worker_({.server = server, .token = NodeToken(name), .name = name}, &runner_),
        thread_([this] { status_ = worker_.Run(); }) {}
  ~NodeThread() {
    worker_.Stop();
    thread_.join();
    EXPECT_TRUE(status_.ok()) << status_;
  }
  const ScriptedJobRunner& runner() const { return runner_; }

 private:
  ScriptedJobRunner runner_;
  harness::NodeWorker worker_;
  absl::Status status_;
  std::thread thread_;
};

class SchedulerScenarios : public SchedulerFixture {
 protected:
  // How the scenarios run the scheduler: 30 s leases, 1 s heartbeats, no
  // noise limit of its own (a repository may set one), /metrics and
  // /report on a port of their own.
  scheduler::ServerOptions Options() const {
    scheduler::ServerOptions o;
    o.address = "127.0.0.1:0";
    o.tokens_file = dir_ + "/tokens";
    o.http_address = "127.0.0.1:0";
    o.scheduler.lease_duration = absl::Seconds(30);
    o.scheduler.heartbeat_interval_s = 1;
    o.scheduler.max_calibration_noise = 1;
    return o;
  }

  void StartServer(scheduler::ServerOptions options, results::StoreOptions store = {}) {
    options_ = options;
    store_options_ = store;
    absl::StatusOr<std::unique_ptr<results::Store>> opened =
        results::OpenStore(db_url_, store_options_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    absl::StatusOr<std::unique_ptr<scheduler::SchedulerServer>> started =
        scheduler::SchedulerServer::Start(options_, *std::move(opened));
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    Connect(server_->port(), server_->http_port());
  }
  void StartServer() { StartServer(Options()); }

  // Shuts the scheduler down and starts it again on the same ports and
  // store.
  void RestartServer() {
    const int port = server_->port(), http_port = server_->http_port();
    server_->Shutdown();
    server_.reset();
    options_.address = absl::StrCat("127.0.0.1:", port);
    options_.http_address = absl::StrCat("127.0.0.1:", http_port);
    StartServer(options_, store_options_);
  }

  // A node named `name` (one of kNodeNames, for its token) whose jobs
  // `script` answers.
  std::unique_ptr<NodeThread> StartNode(const std::string& name, Script script) {
    return std::make_unique<NodeThread>(address_, name, std::move(script), launcher_.get());
  }

  // Answers each candidate commit as `answers` says, keyed by the refs
  // that name them (resolved now); a commit none names fails the test and
  // is answered as unchanged. Each job takes at least `duration`.
  Script ByCandidate(const std::map<std::string, ScriptedAnswer>& answers,
                     absl::Duration duration = absl::ZeroDuration()) {
    std::map<std::string, ScriptedAnswer> by_sha;
    for (const auto& [ref, answer] : answers) by_sha[Rev(ref)] = answer;
    return [by_sha, duration](const harness::EvalRequest& request) {
      absl::SleepFor(duration);
      auto it = by_sha.find(request.candidate_ref);
      EXPECT_NE(it, by_sha.end()) << "no answer scripted for " << request.candidate_ref;
      return it == by_sha.end() ? Unchanged() : it->second;
    };
  }

  std::unique_ptr<platform::ProcessLauncher> launcher_ = platform::NewSandboxLauncher();
  scheduler::ServerOptions options_;
  results::StoreOptions store_options_;
  std::unique_ptr<scheduler::SchedulerServer> server_;
};

}  // namespace densegate::test

#endif  // DENSEGATE_TESTS_SCENARIO_FIXTURE_H_
