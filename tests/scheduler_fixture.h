// What the scheduler's integration suites share: a temporary directory
// with a tokens file and a git repository of the tiny fixture workload
// (tagged `base`), and a client of a running scheduler: gRPC stubs with
// per-role tokens, its HTTP pages, and simulated nodes that speak the node
// protocol themselves. How the scheduler and its nodes run is each suite's:
// real processes (scheduler_test: kill -9, restart, TLS, sandboxes) or one
// process with scripted nodes (scheduler_scenarios_test: everything else).
#ifndef DENSEGATE_TESTS_SCHEDULER_FIXTURE_H_
#define DENSEGATE_TESTS_SCHEDULER_FIXTURE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/densegate.grpc.pb.h"
#include "results/store/store.h"
#include "results/store/testing/postgres_for_test.h"
#include "results/store/testing/test_database.h"
#include "results/verdict/testing/verdicts.h"
#include "scheduler/tokens.h"
#include "testing/test_util.h"

namespace densegate::test {

// The tokens file (hashes only), and the tokens the tests present. Each node
// the tests start has a token of its own ("node-token-NAME"); the simulated
// nodes speak as admin, which may act as any node.
inline const char* const kNodeNames[] = {"n1",   "n2",       "doomed",  "rescuer",
                                  "survivor", "only", "tls-node", "leaver"};

inline std::string NodeToken(const std::string& name) { return "node-token-" + name; }

inline std::string TokensFile() {
  std::string text;
  auto line = [&](const std::string& role, const std::string& token, const std::string& who) {
    absl::StrAppend(&text, role, " sha256:", scheduler::HashToken(token), " ", who, "\n");
  };
  line("ci", "ci-token-0001", "ci");
  line("agent", "agent-token-01", "agent:campaign-1");
  line("agent", "agent-token-02", "agent:campaign-2");
  line("viewer", "viewer-token-1", "viewer");
  line("maintainer", "maintainer-token-1", "maintainer:ana");
  line("admin", "admin-token-01", "admin");
  for (const char* name : kNodeNames) line("node", NodeToken(name), name);
  line("node", NodeToken("honest"), "honest");
  return text;
}

class SchedulerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTmpDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    Sh("rm -rf " + dir_ + " && mkdir -p " + dir_);
    std::ofstream(dir_ + "/tokens") << TokensFile();
    repo_ = dir_ + "/repo";
    Sh("mkdir -p " + repo_ + " && cp " + Runfile("tests/fixtures/tiny_workload") + "/* " + repo_);
    Git("init -q");
    Commit("baseline");
    Git("tag base");
    db_url_ = "sqlite:" + dir_ + "/db";
  }

  void Git(const std::string& args) {
    Sh("git -c user.name=t -c user.email=t@t -C " + repo_ + " " + args);
  }
  void Commit(const std::string& message) { Git("add -A && true"); Git("commit -q --allow-empty -m '" + message + "'"); }
  // A branch off `base` with one change.
  void Branch(const std::string& name, const std::string& shell) {
    Git("checkout -q -b " + name + " base");
    Sh("cd " + repo_ + " && " + shell);
    Git("commit -q -am " + name);
    Git("checkout -q base");
  }

  // Talks to the scheduler at 127.0.0.1:`port` (HTTP pages at `http_port`).
  void Connect(int port, int http_port) {
    address_ = "127.0.0.1:" + std::to_string(port);
    http_port_ = http_port;
    stub_ = v1::Densegate::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  // The full sha `ref` names in the repository.
  std::string Rev(const std::string& ref) {
    const std::string out = dir_ + "/rev";
    Sh("git -C " + repo_ + " rev-parse " + ref + " > " + out);
    std::string sha;
    std::ifstream(out) >> sha;
    return sha;
  }

  grpc::Status Submit(const std::string& token, const std::string& ref, v1::CandidateKind kind,
                      v1::SubmitResponse* resp, const std::string& repo = "") {
    v1::SubmitRequest req;
    req.set_repo(repo.empty() ? repo_ : repo);
    req.set_baseline_ref("base");
    req.set_candidate_ref(ref);
    req.set_kind(kind);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    return stub_->Submit(&ctx, req, resp);
  }

  // Watches `id` as a viewer until its stream ends or `each`, called with
  // every event, returns false.
  void Watch(const std::string& id, std::function<bool(const v1::EvaluationEvent&)> each) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    v1::WatchEvaluationRequest req;
    req.set_id(id);
    auto reader = stub_->WatchEvaluation(&ctx, req);
    v1::EvaluationEvent ev;
    bool watching = true;
    while (reader->Read(&ev)) {
      if (watching && !each(ev)) {
        watching = false;
        ctx.TryCancel();
      }
    }
    reader->Finish();
  }

  // Follows the evaluation until it is `until` (RUNNING) or ends; returns
  // it as it is then.
  v1::Evaluation WaitDone(const std::string& id, v1::EvaluationState until = v1::FINISHED) {
    Watch(id, [&](const v1::EvaluationEvent& ev) {
      return !(until == v1::RUNNING && ev.event_case() == v1::EvaluationEvent::kState &&
               ev.state() == v1::RUNNING);
    });
    return Get(id);
  }

  // The progress reports a watcher of `id` receives until it ends; `each`
  // sees every event as it arrives.
  std::vector<v1::Progress> WatchProgress(
      const std::string& id, std::function<void(const v1::EvaluationEvent&)> each = {}) {
    std::vector<v1::Progress> progress;
    Watch(id, [&](const v1::EvaluationEvent& ev) {
      if (each) each(ev);
      if (ev.has_progress()) progress.push_back(ev.progress());
      return true;
    });
    return progress;
  }

  // A node service stub, for tests that speak the node protocol themselves.
  std::unique_ptr<v1::NodeService::Stub> NodeStub() const {
    return v1::NodeService::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  // Runs `method`, a call on a node stub, with `token` (default: admin's,
  // which may act as any node).
  template <typename Method>
  static grpc::Status AsNode(Method method, const std::string& token = "admin-token-01") {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    return method(&ctx);
  }

  // Registers a simulated CPU node named `name`; its id, empty on failure.
  static std::string RegisterSimulatedNode(v1::NodeService::Stub& nodes, const std::string& name) {
    v1::RegisterNodeRequest reg;
    reg.set_name(name);
    reg.mutable_dimensions()->set_accelerator_kind("cpu");
    reg.mutable_dimensions()->set_fingerprint("test");
    v1::RegisterNodeResponse resp;
    grpc::Status st =
        AsNode([&](grpc::ClientContext* c) { return nodes.RegisterNode(c, reg, &resp); });
    EXPECT_TRUE(st.ok()) << name << ": " << st.error_message();
    return resp.node_id();
  }

  // Sends `reports` (each a stage, progress or sample) for `node`'s lease
  // `lease_id` on one report stream; whether all of them went through.
  static bool SendReports(v1::NodeService::Stub& nodes, const std::string& node,
                          const std::string& lease_id, std::vector<v1::NodeReport> reports) {
    grpc::ClientContext streaming;
    streaming.AddMetadata("authorization", "Bearer admin-token-01");
    v1::ReportStreamResponse accepted;
    auto stream = nodes.ReportStream(&streaming, &accepted);
    for (v1::NodeReport& r : reports) {
      r.set_node_id(node);
      r.set_lease_id(lease_id);
      if (!stream->Write(r)) return false;
    }
    stream->WritesDone();
    return stream->Finish().ok();
  }

  // What one Synchronize of `node` returns (no lease on failure).
  static v1::SynchronizeResponse Synchronize(v1::NodeService::Stub& nodes,
                                             const std::string& node) {
    v1::SynchronizeRequest sync;
    sync.set_node_id(node);
    v1::SynchronizeResponse resp;
    grpc::Status st =
        AsNode([&](grpc::ClientContext* c) { return nodes.Synchronize(c, sync, &resp); });
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  // Ends `node`'s `lease` with a verdict of `decision` (ACCEPT or REJECT)
  // as an honest node reports one, claiming the node's next job in `reply`.
  static grpc::Status FinishWithVerdict(v1::NodeService::Stub& nodes, const std::string& node,
                                        const v1::Lease& lease, v1::Decision decision,
                                        v1::FinishLeaseResponse* reply,
                                        const std::string& token = "admin-token-01") {
    v1::FinishLeaseRequest finish;
    finish.set_node_id(node);
    finish.set_lease_id(lease.id());
    const v1::Candidate& c = lease.evaluation().candidate();
    // An ACCEPT names the tiny workload's one metric as not measured.
    *finish.mutable_verdict() = results::testing::VerdictWithoutSamples(
        lease.evaluation().id(), results::EffectivePolicy(c.policy(), c.kind()), decision,
        "checksum.time");
    finish.set_claim_next(true);
    return AsNode([&](grpc::ClientContext* c) { return nodes.FinishLease(c, finish, reply); },
                  token);
  }

  // Finishes `node`'s calibration lease at noise `noise`; with
  // `claim_next`, *reply carries the node's next lease.
  static grpc::Status FinishCalibration(v1::NodeService::Stub& nodes, const std::string& node,
                                        const v1::Lease& calibration, double noise,
                                        bool claim_next, v1::FinishLeaseResponse* reply,
                                        const std::string& token = "admin-token-01") {
    v1::FinishLeaseRequest finish;
    finish.set_node_id(node);
    finish.set_lease_id(calibration.id());
    finish.set_calibration_noise(noise);
    finish.set_claim_next(claim_next);
    return AsNode([&](grpc::ClientContext* c) { return nodes.FinishLease(c, finish, reply); },
                  token);
  }

  v1::Evaluation Get(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    v1::GetEvaluationRequest req;
    req.set_id(id);
    v1::Evaluation e;
    EXPECT_TRUE(stub_->GetEvaluation(&ctx, req, &e).ok());
    return e;
  }

  // An evaluation's feedback as GetFeedback sends it: the info, and the
  // files put back together.
  struct Feedback {
    v1::FeedbackInfo info;
    std::map<std::string, std::string> files;
  };
  grpc::Status GetFeedback(const std::string& id, bool summary_only, Feedback* out,
                           const std::string& token = "agent-token-02") {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::GetFeedbackRequest req;
    req.set_evaluation_id(id);
    req.set_summary_only(summary_only);
    auto reader = stub_->GetFeedback(&ctx, req);
    v1::FeedbackChunk chunk;
    while (reader->Read(&chunk)) {
      if (chunk.has_info()) out->info = chunk.info();
      if (chunk.has_file()) out->files[chunk.file().path()] += chunk.file().content();
    }
    return reader->Finish();
  }

  // GET /metrics over a plain socket.
  std::string Metrics() { return Http("/metrics"); }
  // The value of an unlabelled metric in Metrics(), or -1 when it is missing.
  int64_t MetricValue(const std::string& name) {
    const std::string m = Metrics(), key = absl::StrCat("\n", name, " ");
    size_t at = m.find(key);
    return at == std::string::npos ? -1 : std::atoll(m.c_str() + at + key.size());
  }

  // GET `target` from the scheduler's HTTP pages; the whole response.
  std::string Http(const std::string& target, const std::string& authorization = "") {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(http_port_));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    const std::string req = absl::StrCat(
        "GET ", target, " HTTP/1.1\r\nHost: x\r\n",
        authorization.empty() ? "" : "Authorization: " + authorization + "\r\n", "\r\n");
    EXPECT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
    std::string resp;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) resp.append(buf, n);
    close(fd);
    return resp;
  }

  std::string dir_, repo_, address_;
  // The store the server runs on: a SQLite file unless a test picks another.
  std::string db_url_;
  int http_port_ = 0;
  // OnEachStore's PostgreSQL database; declared before the suites' server,
  // so that the server stops first.
  std::unique_ptr<results::testing::TestDatabase> pg_;
  std::unique_ptr<v1::Densegate::Stub> stub_;
};

// Runs each scenario of `Fixture` on each store: its SQLite file, or a
// fresh PostgreSQL database (DENSEGATE_PG_URL; skipped without one, failed
// under CI).
template <class Fixture>
class OnEachStore : public Fixture, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    Fixture::SetUp();
    if (GetParam() != "postgresql") return;
    results::testing::CreatePostgresForThisTest(&this->pg_);
    if (this->pg_ == nullptr) return;
    this->db_url_ = this->pg_->url();
  }
};

// A faster checksum.h for the tiny workload: blocks of 4096 before each
// modulo.
inline constexpr char kFast[] =
    "cat > checksum.h <<'EOF'\n"
    "#pragma once\n#include <cstdint>\n#include <vector>\n"
    "inline uint64_t Checksum(const std::vector<uint32_t>& v) {\n"
    "  uint64_t sum = 0; size_t i = 0;\n"
    "  while (i < v.size()) { size_t end = i + 4096 < v.size() ? i + 4096 : v.size();\n"
    "    for (; i < end; ++i) sum += v[i]; sum %= 1000000007ULL; }\n"
    "  return sum; }\n"
    "EOF";

}  // namespace densegate::test

#endif  // DENSEGATE_TESTS_SCHEDULER_FIXTURE_H_
