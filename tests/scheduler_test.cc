// The scheduler with real processes on loopback: `densegate serve` on port 0
// over each store (SQLite, and PostgreSQL with DENSEGATE_PG_URL), `densegate
// node` workers, and clients speaking gRPC with per-role tokens. Candidates
// are commits of the tiny fixture workload.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/densegate.grpc.pb.h"
#include "results/gate/gate.h"
#include "results/store/store.h"
#include "results/store/testing/postgres_for_test.h"
#include "results/store/testing/test_database.h"
#include "results/verdict/testing/verdicts.h"
#include "scheduler/tokens.h"
#include "testing/test_util.h"

extern char** environ;

namespace densegate {
namespace {

using test::ReadFile;
using test::Runfile;
using test::Sh;
using test::TestTmpDir;
using test::WaitFor;

using ::testing::ElementsAre;
using ::testing::HasSubstr;


// The tokens file (hashes only), and the tokens the tests present. Each node
// the tests start has a token of its own ("node-token-NAME"); the simulated
// nodes speak as admin, which may act as any node.
const char* const kNodeNames[] = {"n1",   "n2",       "doomed",  "rescuer",
                                  "survivor", "only", "tls-node", "leaver"};

std::string NodeToken(const std::string& name) { return "node-token-" + name; }

std::string TokensFile() {
  std::string text;
  auto line = [&](const std::string& role, const std::string& token, const std::string& who) {
    absl::StrAppend(&text, role, " sha256:", scheduler::HashToken(token), " ", who, "\n");
  };
  line("ci", "ci-token-0001", "ci");
  line("agent", "agent-token-01", "agent:campaign-1");
  line("agent", "agent-token-02", "agent:campaign-2");
  line("viewer", "viewer-token-1", "viewer");
  line("admin", "admin-token-01", "admin");
  for (const char* name : kNodeNames) line("node", NodeToken(name), name);
  line("node", NodeToken("honest"), "honest");
  return text;
}

// A child process in its own process group.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv, const std::string& log) {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, args[0], &fa, &attr, args.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  ~Child() { Kill(); }
  // SIGTERM to the child alone (not its process group), as a service
  // manager stops it; waits for it to exit.
  void Terminate() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

class SchedulerTest : public ::testing::Test {
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

  // `address` "127.0.0.1:0" picks a port; a restart passes the old one.
  void StartServer(int lease_s = 30, const std::string& address = "127.0.0.1:0",
                   const std::vector<std::string>& extra = {}) {
    const std::string port_file = dir_ + "/port";
    std::remove(port_file.c_str());
    std::vector<std::string> argv = {Runfile("cli/densegate"), "serve", "--address", address,
                                     "--port_file", port_file, "--db", db_url_,
                                     "--tokens", dir_ + "/tokens", "--lease_s",
                                     std::to_string(lease_s), "--heartbeat_s", "1",
                                     "--max_calibration_noise", "1", "--http_address",
                                     "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = std::make_unique<Child>(argv, dir_ + "/serve.log");
    // Wait for the port file (written once the server listens).
    WaitFor([&] { return std::ifstream(port_file).good(); }, absl::Seconds(30));
    int port = 0;
    std::ifstream(port_file) >> port >> http_port_;
    ASSERT_GT(port, 0) << "the server did not start; see " << dir_ << "/serve.log";
    address_ = "127.0.0.1:" + std::to_string(port);
    stub_ = v1::Densegate::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<Child> StartNode(const std::string& name,
                                   const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {Runfile("cli/densegate"), "node", "--server", address_,
                                     "--token", NodeToken(name), "--name", name, "--workspace",
                                     dir_ + "/ws-" + name};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Child>(argv, dir_ + "/" + name + ".log");
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

  // Follows the evaluation to its end; returns the final evaluation.
  v1::Evaluation WaitDone(const std::string& id, v1::EvaluationState until = v1::FINISHED) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    v1::WatchEvaluationRequest req;
    req.set_id(id);
    auto reader = stub_->WatchEvaluation(&ctx, req);
    v1::EvaluationEvent ev;
    while (reader->Read(&ev)) {
      if (ev.event_case() == v1::EvaluationEvent::kState && ev.state() == until &&
          until == v1::RUNNING) {
        ctx.TryCancel();
      }
    }
    reader->Finish();
    return Get(id);
  }

  // The progress reports a watcher of `id` receives until it ends.
  std::vector<v1::Progress> WatchProgress(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    v1::WatchEvaluationRequest req;
    req.set_id(id);
    auto reader = stub_->WatchEvaluation(&ctx, req);
    std::vector<v1::Progress> progress;
    v1::EvaluationEvent ev;
    while (reader->Read(&ev)) {
      if (ev.has_progress()) progress.push_back(ev.progress());
    }
    reader->Finish();
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
  // SchedulerOnEachStore's PostgreSQL database; declared before server_, so
  // that the server stops first.
  std::unique_ptr<results::testing::TestDatabase> pg_;
  std::unique_ptr<Child> server_;
  std::unique_ptr<v1::Densegate::Stub> stub_;
};

// Every scenario but TLS (transport only) runs on each store: the SQLite
// file of SchedulerTest, or a fresh PostgreSQL database (DENSEGATE_PG_URL;
// skipped without one, failed under CI).
class SchedulerOnEachStore : public SchedulerTest,
                             public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    SchedulerTest::SetUp();
    if (GetParam() != "postgresql") return;
    results::testing::CreatePostgresForThisTest(&pg_);
    if (pg_ == nullptr) return;
    db_url_ = pg_->url();
  }
};

INSTANTIATE_TEST_SUITE_P(Stores, SchedulerOnEachStore, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

constexpr char kFast[] =
    "cat > checksum.h <<'EOF'\n"
    "#pragma once\n#include <cstdint>\n#include <vector>\n"
    "inline uint64_t Checksum(const std::vector<uint32_t>& v) {\n"
    "  uint64_t sum = 0; size_t i = 0;\n"
    "  while (i < v.size()) { size_t end = i + 4096 < v.size() ? i + 4096 : v.size();\n"
    "    for (; i < end; ++i) sum += v[i]; sum %= 1000000007ULL; }\n"
    "  return sum; }\n"
    "EOF";

TEST_P(SchedulerOnEachStore, SubmissionsAcrossTwoNodesReachTheRightVerdicts) {
  Branch("fast", kFast);
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  Branch("broken", "echo 'not C++' >> checksum.h");
  Branch("wrong", "sed -i 's/1000000007ULL/1000000009ULL/' checksum.h");
  for (int i = 1; i <= 16; ++i) {
    Branch(absl::StrCat("comment-", i), absl::StrCat("sed -i '1i // note ", i, "' checksum.h"));
  }
  // Claims one at a time (PostgreSQL; SQLite ignores it): the two nodes
  // take turns and every candidate still reaches its verdict.
  StartServer(30, "127.0.0.1:0", {"--max_concurrent_claims", "1"});
  auto n1 = StartNode("n1");
  auto n2 = StartNode("n2");
  struct Case {
    std::string ref;
    v1::CandidateKind kind;
    v1::Decision want;
  };
  std::vector<Case> cases = {{"fast", v1::EXPERIMENT, v1::ACCEPT},
                             {"comment", v1::CI, v1::ACCEPT},
                             {"broken", v1::EXPERIMENT, v1::REJECT},
                             {"wrong", v1::CI, v1::REJECT}};
  // Twenty submissions in all: sixteen more CI commits, each a comment.
  for (int i = 1; i <= 16; ++i) cases.push_back({absl::StrCat("comment-", i), v1::CI, v1::ACCEPT});
  std::vector<std::string> ids;
  for (const Case& c : cases) {
    v1::SubmitResponse r;
    ASSERT_TRUE(Submit(c.kind == v1::CI ? "ci-token-0001" : "agent-token-01", c.ref, c.kind, &r).ok());
    EXPECT_FALSE(r.deduplicated());
    ids.push_back(r.evaluation().id());
  }
  // The same candidate again attaches to its evaluation.
  v1::SubmitResponse again;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &again).ok());
  EXPECT_TRUE(again.deduplicated());
  EXPECT_EQ(again.evaluation().id(), ids[1]);
  // Watched from its start, the accepted experiment shows each progress
  // report its node sent once: none empty, none repeated (heartbeats used
  // to send the latest report again every second).
  const std::vector<v1::Progress> progress = WatchProgress(ids[0]);
  EXPECT_GE(progress.size(), 3u);
  for (size_t i = 0; i < progress.size(); ++i) {
    SCOPED_TRACE(progress[i].ShortDebugString());
    EXPECT_NE(progress[i].stage(), v1::STAGE_KIND_UNSPECIFIED);
    if (i > 0) {
      EXPECT_NE(progress[i].SerializeAsString(), progress[i - 1].SerializeAsString());
    }
  }
  std::set<std::string> nodes;
  for (size_t i = 0; i < cases.size(); ++i) {
    v1::Evaluation e = WaitDone(ids[i]);
    EXPECT_EQ(e.state(), v1::FINISHED) << cases[i].ref;
    EXPECT_EQ(e.verdict().decision(), cases[i].want) << cases[i].ref;
    EXPECT_EQ(e.verdict().evaluation_id(), ids[i]);
    EXPECT_FALSE(e.stages().empty());
    nodes.insert(e.node_id());
  }
  EXPECT_EQ(nodes.size(), 2u) << "both nodes should have taken work";
  // The accepted experiment's verdict lists the samples it was computed from.
  EXPECT_GT(WaitDone(ids[0]).verdict().provenance().sample_ids_size(), 0);
  // Prometheus sees the same.
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("densegate_verdicts_total{decision=\"accept\"} 18"));
  EXPECT_THAT(metrics, HasSubstr("densegate_verdicts_total{decision=\"reject\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("densegate_nodes{state=\"active\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("densegate_queued_evaluations{kind=\"ci\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("densegate_claim_latency_seconds_count"));
  // Verdicts with the next claim: on PostgreSQL in shared statements, each
  // carrying at least one lease; SQLite writes each alone and counts none.
  const int64_t statements = MetricValue("densegate_finish_statements_total");
  const int64_t leases = MetricValue("densegate_finish_statement_leases_total");
  if (GetParam() == "postgresql") {
    EXPECT_GE(statements, 1);
    EXPECT_GE(leases, statements);
    EXPECT_LE(leases, 20);
  } else {
    EXPECT_EQ(statements, 0);
    EXPECT_EQ(leases, 0);
  }
}

TEST_P(SchedulerOnEachStore, ANodeKilledMidJobLosesItsLeaseAndAnotherFinishes) {
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  StartServer(/*lease_s=*/3);
  v1::SubmitResponse r;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &r).ok());
  auto doomed = StartNode("doomed");
  WaitDone(r.evaluation().id(), v1::RUNNING);
  doomed->Kill();  // SIGKILL to its whole process group.
  auto rescuer = StartNode("rescuer");
  v1::Evaluation e = WaitDone(r.evaluation().id());
  EXPECT_EQ(e.state(), v1::FINISHED);
  EXPECT_EQ(e.verdict().decision(), v1::ACCEPT);
  // At least one retry; a loaded machine may delay a 1 s heartbeat past the
  // 3 s lease and cost another.
  EXPECT_GE(e.attempt(), 2);
  EXPECT_EQ(e.node_id(), e.verdict().provenance().node_id());
}

// Three candidates, one node; the scheduler is killed with one running and
// two queued, restarted on the same store, and every verdict arrives once.
TEST_P(SchedulerOnEachStore, SchedulerKilledAndRestartedLosesNoVerdict) {
  Branch("fast", kFast);
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  Branch("wrong", "sed -i 's/1000000007ULL/1000000009ULL/' checksum.h");
  StartServer(/*lease_s=*/5);
  std::vector<std::string> ids;
  for (const char* ref : {"fast", "comment", "wrong"}) {
    v1::SubmitResponse r;
    ASSERT_TRUE(Submit("ci-token-0001", ref, v1::CI, &r).ok());
    ids.push_back(r.evaluation().id());
  }
  auto node = StartNode("survivor");
  WaitDone(ids[0], v1::RUNNING);
  server_->Kill();  // kill -9 with one job running and two queued.
  StartServer(/*lease_s=*/5, address_);
  for (const std::string& id : ids) {
    v1::Evaluation e = WaitDone(id);
    EXPECT_EQ(e.state(), v1::FINISHED) << id;
    EXPECT_NE(e.verdict().decision(), v1::DECISION_UNSPECIFIED) << id;
  }
  EXPECT_EQ(Get(ids[2]).verdict().decision(), v1::REJECT);
}

TEST_P(SchedulerOnEachStore, CiRunsBeforeExperimentsAndCancelStopsARunningJob) {
  Branch("fast", kFast);
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  Branch("wrong", "sed -i 's/1000000007ULL/1000000009ULL/' checksum.h");
  StartServer();
  // Queued while no node is up: an experiment first, then CI work.
  v1::SubmitResponse experiment, ci, doomed;
  ASSERT_TRUE(Submit("agent-token-01", "fast", v1::EXPERIMENT, &experiment).ok());
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &ci).ok());
  ASSERT_TRUE(Submit("agent-token-01", "wrong", v1::EXPERIMENT, &doomed).ok());
  // /metrics shows the queue by class, priority and accelerator kind.
  const std::string queued = Metrics();
  EXPECT_THAT(queued, HasSubstr("densegate_queue_depth{class=\"ci\",priority=\"0\","
                                "accelerator_kind=\"any\"} 1"));
  EXPECT_THAT(queued, HasSubstr("densegate_queue_depth{class=\"experiment\",priority=\"0\","
                                "accelerator_kind=\"any\"} 2"));
  auto node = StartNode("only");
  // One node, one job at a time: CI is leased first although submitted later.
  WaitDone(ci.evaluation().id(), v1::RUNNING);
  EXPECT_EQ(Get(experiment.evaluation().id()).state(), v1::QUEUED);
  // Cancel the experiment that runs after the CI job: the node drops it at
  // its next stage boundary and moves on.
  WaitDone(experiment.evaluation().id(), v1::RUNNING);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    v1::CancelEvaluationRequest req;
    req.set_id(experiment.evaluation().id());
    req.set_reason("superseded");
    v1::Evaluation e;
    ASSERT_TRUE(stub_->CancelEvaluation(&ctx, req, &e).ok());
    EXPECT_EQ(e.state(), v1::CANCELLED);
  }
  EXPECT_EQ(WaitDone(ci.evaluation().id()).verdict().decision(), v1::ACCEPT);
  v1::Evaluation last = WaitDone(doomed.evaluation().id());
  EXPECT_EQ(last.state(), v1::FINISHED);
  EXPECT_EQ(last.verdict().decision(), v1::REJECT);
  v1::Evaluation cancelled = Get(experiment.evaluation().id());
  EXPECT_EQ(cancelled.state(), v1::CANCELLED);
  EXPECT_FALSE(cancelled.has_verdict());
}

// Whatever a node's arms leave running (Bazel leaves its server, detached
// in a session of its own) ends with the node: the candidate's with its
// evaluation, the baseline's, whose sandbox lives on for its Bazel server,
// when the node is stopped (each sandbox is a PID namespace that dies with
// its parent).
TEST_F(SchedulerTest, NothingANodesArmsStartOutlivesTheNode) {
  Sh("cd " + repo_ + " && sed -i '/^set -e/a setsid sleep 3142 </dev/null >/dev/null 2>&1 &' " +
     "build.sh");
  Git("commit -q -am 'a build that leaves a process running'");
  Git("tag -f base");
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  StartServer();
  v1::SubmitResponse r;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &r).ok());
  // Users of its own, so that no other test's node is counted.
  auto node = StartNode("leaver", {"--sandbox_uid", "59400", "--candidate_uid", "59401"});
  EXPECT_EQ(WaitDone(r.evaluation().id()).state(), v1::FINISHED);
  // "sleep 314[2]": not the shell, whose own command line names the pattern.
  const std::string count_file = dir_ + "/left";
  // Two lines: the sleeps left, and every process of the node's users.
  auto running = [&](const std::string& want) {
    std::string count;
    WaitFor(
        [&] {
          Sh("(pgrep -c -f 'sleep 314[2]' || true) > " + count_file +
             "; (pgrep -c -U 59400,59401 || true) >> " + count_file);
          count = ReadFile(count_file);
          return absl::StartsWith(count, want);
        },
        absl::Seconds(10));
    return count;
  };
  // The baseline's sandbox keeps its own running while the node does; the
  // candidate's ended with the evaluation.
  EXPECT_THAT(running("1\n"), ::testing::StartsWith("1\n"));
  node->Terminate();
  EXPECT_EQ(running("0\n0\n"), "0\n0\n") << "processes of the node's arms outlived it";
}

TEST_F(SchedulerTest, TlsServesOnlyEncryptedClientsAndNodes) {
  // A self-signed certificate for 127.0.0.1, made now.
  Sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=densegate-test "
     "-addext subjectAltName=IP:127.0.0.1 -keyout " + dir_ + "/key.pem -out " + dir_ +
     "/cert.pem 2>/dev/null");
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  StartServer(30, "127.0.0.1:0",
              {"--tls_cert", dir_ + "/cert.pem", "--tls_key", dir_ + "/key.pem"});
  std::ifstream pem_in(dir_ + "/cert.pem");
  std::stringstream pem;
  pem << pem_in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  stub_ = v1::Densegate::NewStub(grpc::CreateChannel(address_, grpc::SslCredentials(ssl)));
  auto plain = v1::Densegate::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetEvaluationRequest req;
    req.set_id("ev-unknown");
    v1::Evaluation e;
    EXPECT_EQ(plain->GetEvaluation(&ctx, req, &e).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  auto node = StartNode("tls-node", {"--ca", dir_ + "/cert.pem"});
  v1::SubmitResponse r;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &r).ok());
  EXPECT_EQ(WaitDone(r.evaluation().id()).verdict().decision(), v1::ACCEPT);
}

TEST_P(SchedulerOnEachStore, MergeQueueLandsOnlyWhatWasMeasuredAgainstTheTip) {
  // The benchmark's inputs are compared (its binary is built from checksum.h
  // and bench.cc only), so the comments are decided without pairs and the
  // re-measure of "fast" finds the programs it measured before.
  Sh("sed -i 's|\"timeout_s\": 60,|\"timeout_s\": 60, \"skip_when_identical\": true,|' " +
     repo_ + "/densegate.json");
  Git("commit -q -am 'compare the benchmark inputs'");
  Git("tag -f base");
  Git("branch trunk base");
  // Two comments on the same line of build.sh conflict with each other, not
  // with "fast" (checksum.h).
  Branch("comment", "echo '# no-op' >> build.sh");
  Branch("other-comment", "echo '# another no-op' >> build.sh");
  Branch("fast", kFast);
  StartServer();
  auto submit = [&](const std::string& token, const std::string& ref, v1::CandidateKind kind,
                    v1::Policy policy) {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch("trunk");
    req.set_baseline_ref("base");
    req.set_candidate_ref(ref);
    req.set_kind(kind);
    req.set_policy(policy);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::SubmitResponse r;
    grpc::Status s = stub_->Submit(&ctx, req, &r);
    EXPECT_TRUE(s.ok()) << ref << ": " << s.error_message();
    return r.evaluation().id();
  };
  // Only CI and admin tokens may aim at a branch.
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch("trunk");
    req.set_baseline_ref("base");
    req.set_candidate_ref("fast");
    req.set_kind(v1::EXPERIMENT);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    v1::SubmitResponse r;
    EXPECT_EQ(stub_->Submit(&ctx, req, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // One node, so the order is CI (FIFO), then the experiment: "comment"
  // lands as measured; "other-comment" was measured against base too, but
  // the tip moved and it conflicts; "fast" is re-measured against the new
  // tip and lands as a merge commit.
  const std::string comment = submit("ci-token-0001", "comment", v1::CI, v1::NO_REGRESSION);
  const std::string other = submit("ci-token-0001", "other-comment", v1::CI, v1::NO_REGRESSION);
  const std::string fast = submit("ci-token-0001", "fast", v1::EXPERIMENT, v1::GAIN);
  auto node = StartNode("n1");
  auto merge_ended = [&](const std::string& id) {
    v1::Evaluation e;
    if (!WaitFor(
            [&] {
              e = Get(id);
              return e.merge().state() == v1::MERGED || e.merge().state() == v1::MERGE_FAILED;
            },
            absl::Minutes(2), absl::Milliseconds(100))) {
      ADD_FAILURE() << "the merge of " << id << " did not end";
    }
    return e;
  };
  auto rev = [&](const std::string& ref) {
    std::string out = dir_ + "/rev";
    Sh("git -C " + repo_ + " rev-parse " + ref + " > " + out);
    std::string sha;
    std::ifstream(out) >> sha;
    return sha;
  };
  auto note = [&](const std::string& sha) {
    std::string out = dir_ + "/note";
    Sh("git -C " + repo_ + " notes --ref=densegate show " + sha + " > " + out);
    std::stringstream text;
    text << std::ifstream(out).rdbuf();
    return text.str();
  };

  v1::Evaluation c = merge_ended(comment);
  ASSERT_EQ(c.merge().state(), v1::MERGED) << c.merge().message();
  EXPECT_EQ(c.merge().merged_sha(), rev("comment"));  // A fast-forward.
  EXPECT_THAT(note(c.merge().merged_sha()), HasSubstr("evaluation " + comment));

  v1::Evaluation o = merge_ended(other);
  EXPECT_EQ(o.verdict().decision(), v1::ACCEPT);
  ASSERT_EQ(o.merge().state(), v1::MERGE_FAILED);
  EXPECT_THAT(o.merge().message(), HasSubstr("conflicts with trunk"));
  EXPECT_THAT(o.merge().message(), HasSubstr("build.sh"));

  v1::Evaluation f = merge_ended(fast);
  ASSERT_EQ(f.merge().state(), v1::MERGED) << f.merge().message();
  ASSERT_FALSE(f.merge().remeasure_evaluation_id().empty());
  v1::Evaluation re = Get(f.merge().remeasure_evaluation_id());
  EXPECT_EQ(re.verdict().decision(), v1::ACCEPT);
  EXPECT_EQ(re.candidate().baseline_sha(), rev("comment"));
  EXPECT_EQ(re.candidate().remeasure_of(), fast);
  std::string summaries;
  for (const v1::Stage& s : re.verdict().stages()) summaries += s.summary() + "\n";
  EXPECT_THAT(summaries, HasSubstr("pairs of micro taken from evaluation " + fast)) << summaries;
  EXPECT_EQ(re.verdict().metrics(0).n_pairs(), f.verdict().metrics(0).n_pairs());
  EXPECT_EQ(f.merge().merged_sha(), rev("trunk"));
  EXPECT_EQ(rev("trunk^1"), rev("comment"));
  EXPECT_EQ(rev("trunk^2"), rev("fast"));
  const std::string fast_note = note(rev("trunk"));
  EXPECT_THAT(fast_note, HasSubstr("densegate: accept (policy gain)"));
  EXPECT_THAT(fast_note, HasSubstr("re-measure of " + fast));
  EXPECT_THAT(fast_note, HasSubstr("checksum.time: "));

  // The report over HTTP (viewer token) and gRPC shows what landed.
  EXPECT_THAT(Http("/report?branch=trunk"), HasSubstr("401 Unauthorized"));
  const std::string page = Http("/report?branch=trunk", "Bearer viewer-token-1");
  EXPECT_THAT(page, HasSubstr("200 OK"));
  EXPECT_THAT(page, HasSubstr("text/html"));
  EXPECT_THAT(page, HasSubstr("<svg class=\"chart\""));
  EXPECT_THAT(page, HasSubstr("checksum.time"));
  EXPECT_THAT(Http("/report?branch=trunk&format=md&token=viewer-token-1"),
              HasSubstr("## Headline"));
  EXPECT_THAT(Http("/report?format=pdf&token=viewer-token-1"), HasSubstr("400 Bad Request"));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer viewer-token-1");
  v1::GetReportRequest req;
  req.set_branch("trunk");
  req.set_format(v1::JSON);
  v1::Report report;
  ASSERT_TRUE(stub_->GetReport(&ctx, req, &report).ok());
  EXPECT_EQ(report.content_type(), "application/json");
  EXPECT_THAT(report.content(), HasSubstr("\"headline\""));
}

TEST_P(SchedulerOnEachStore, ActiveNodesCalibrateAgainPeriodically) {
  Branch("comment", "echo '# no-op' >> build.sh");
  StartServer(30, "127.0.0.1:0", {"--calibration_period_s", "1"});
  auto node = StartNode("n1");
  v1::SubmitResponse r;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &r).ok());
  // Calibration on join, then the evaluation (longer than the period).
  EXPECT_EQ(WaitDone(r.evaluation().id()).state(), v1::FINISHED);
  // The node's next request finds its calibration a period old: it
  // calibrates again before any further gate work.
  int64_t n = 0;
  WaitFor(
      [&] {
        n = MetricValue("densegate_calibrations_total");
        return n >= 2;
      },
      absl::Minutes(1), absl::Milliseconds(100));
  EXPECT_GE(n, 2) << Metrics();
}

TEST_P(SchedulerOnEachStore, BisectFindsTheCommitThatSlowedTheMetric) {
  // base -> comment -> slow (128-bit modulo: same result, several times
  // slower) -> comment -> comment.
  Git("checkout -q -b line base");
  auto commit = [&](const std::string& shell, const std::string& message) {
    Sh("cd " + repo_ + " && " + shell);
    Git("commit -q -am '" + message + "'");
    std::string out = dir_ + "/sha";
    Sh("git -C " + repo_ + " rev-parse HEAD > " + out);
    std::string sha;
    std::ifstream(out) >> sha;
    return sha;
  };
  commit("echo '# one' >> build.sh", "note one");
  const std::string slow = commit(
      "sed -i 's|sum = (sum + x) % 1000000007ULL;|sum = static_cast<uint64_t>((static_cast<unsigned "
      "__int128>(sum) + x) % 1000000007ULL);|' checksum.h",
      "reduce in 128 bits");
  commit("echo '# two' >> build.sh", "note two");
  commit("echo '# three' >> build.sh", "note three");
  Git("checkout -q --detach base");
  StartServer();
  auto n1 = StartNode("n1");
  auto n2 = StartNode("n2");
  const std::string out = dir_ + "/bisect.json";
  const int rc = std::system(absl::StrCat(Runfile("cli/densegate"), " bisect --server ", address_,
                                          " --token ci-token-0001 --repo ", repo_,
                                          " --metric checksum.time --good base --bad line "
                                          "--parallel 2 --json > ",
                                          out, " 2> ", dir_, "/bisect.err")
                                 .c_str());
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  std::stringstream err;
  err << std::ifstream(dir_ + "/bisect.err").rdbuf();
  ASSERT_EQ(WEXITSTATUS(rc), 0) << text.str() << err.str();
  EXPECT_THAT(text.str(), HasSubstr("\"culprit\": \"" + slow + "\""));
  EXPECT_THAT(text.str(), HasSubstr("reduce in 128 bits"));
  // Each step is an evaluation scoped to the metric, classified by the gate.
  const nlohmann::json result = nlohmann::json::parse(text.str());
  ASSERT_FALSE(result["steps"].empty());
  for (const nlohmann::json& step : result["steps"]) {
    const std::string& commit = step["commit"].get<std::string>();
    EXPECT_EQ(step["result"], commit == slow ? "regressed" : "clean") << step.dump();
    EXPECT_THAT(Get(step["evaluation"]).candidate().metric_scope(), ElementsAre("checksum.time"));
  }
  // The report puts the bisection back together and names the same commit.
  EXPECT_THAT(Http("/report?format=md&token=viewer-token-1"),
              HasSubstr("culprit " + slow.substr(0, 12)));
}

// A repository stricter than the scheduler (the manifest's
// max_calibration_noise 0.03; the server's flag here is 1): a node
// calibrated at 4.09% gets none of its gate work, which goes to the calm
// node; while that work waits, the noisy node is sent to calibrate again.
TEST_P(SchedulerOnEachStore, ARepositorysNoiseLimitSendsItsWorkToTheCalmNode) {
  Sh("cd " + repo_ + " && sed -i 's/\"max_pairs\": 30}/\"max_pairs\": 30, " +
     "\"max_calibration_noise\": 0.03}/' densegate.json && grep -q max_calibration_noise " +
     "densegate.json");
  Git("commit -q -am 'a stricter noise limit'");
  Git("tag -f base");
  Branch("comment", "echo '// a comment' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  auto calibrated = [&](const std::string& name, double noise) {
    const std::string id = RegisterSimulatedNode(*nodes, name);
    const v1::SynchronizeResponse c = Synchronize(*nodes, id);
    EXPECT_EQ(c.lease().job_kind(), v1::CALIBRATION) << name;
    v1::FinishLeaseResponse done;
    EXPECT_TRUE(FinishCalibration(*nodes, id, c.lease(), noise, false, &done).ok()) << name;
    return id;
  };
  const std::string noisy = calibrated("noisy", 0.0409);
  const std::string calm = calibrated("calm", 0.0016);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());

  const v1::SynchronizeResponse noisy_sync = Synchronize(*nodes, noisy);
  EXPECT_EQ(noisy_sync.lease().job_kind(), v1::CALIBRATION);
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::QUEUED);
  const v1::SynchronizeResponse calm_sync = Synchronize(*nodes, calm);
  EXPECT_EQ(calm_sync.lease().job_kind(), v1::EVALUATION);
  EXPECT_EQ(calm_sync.lease().evaluation().id(), queued.evaluation().id());
  // The lease tells the node its noise, which sizes its end-to-end runs.
  EXPECT_EQ(calm_sync.lease().node_calibration_noise(), 0.0016);
}

// FinishLease with claim_next hands the node its next job in the reply,
// after calibration noise and after a verdict (the store's
// FinishLeaseAndClaimNext); a refused finish claims nothing, and with
// nothing queued the reply is empty.
TEST_P(SchedulerOnEachStore, AFinishCanClaimTheNodesNextJobWhoseProgressReachesWatchers) {
  Branch("comment", "echo '// a comment' >> checksum.h");
  Branch("other", "echo '// other' >> bench.cc");
  StartServer();
  auto nodes = NodeStub();
  const std::string holder = RegisterSimulatedNode(*nodes, "holder");
  const std::string intruder = RegisterSimulatedNode(*nodes, "intruder");
  ASSERT_FALSE(holder.empty());
  ASSERT_FALSE(intruder.empty());
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, holder);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());

  v1::FinishLeaseRequest finish;
  finish.set_node_id(intruder);
  finish.set_lease_id(calibration.lease().id());
  finish.set_calibration_noise(0.01);
  finish.set_claim_next(true);
  v1::FinishLeaseResponse refused;
  EXPECT_EQ(AsNode([&](grpc::ClientContext* c) {
              return nodes->FinishLease(c, finish, &refused);
            }).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_FALSE(refused.has_next_lease());
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::QUEUED);

  finish.set_node_id(holder);
  v1::FinishLeaseResponse calibrated;
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, finish, &calibrated);
              }).ok());
  ASSERT_TRUE(calibrated.has_next_lease());
  const v1::Lease& next = calibrated.next_lease();
  EXPECT_EQ(next.job_kind(), v1::EVALUATION);
  EXPECT_EQ(next.evaluation().id(), queued.evaluation().id());
  EXPECT_GT(next.heartbeat_interval_s(), 0);
  const v1::Evaluation running = Get(queued.evaluation().id());
  EXPECT_EQ(running.state(), v1::RUNNING);
  EXPECT_EQ(running.node_id(), holder);

  // Each progress report reaches a watcher once and in order, also several
  // sent between two of its wake-ups.
  {
    grpc::ClientContext watching;
    watching.AddMetadata("authorization", "Bearer viewer-token-1");
    watching.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::WatchEvaluationRequest watch;
    watch.set_id(next.evaluation().id());
    auto reader = stub_->WatchEvaluation(&watching, watch);
    // Sends the messages as progress reports on one report stream.
    auto report = [&](const std::vector<std::string>& messages) {
      std::vector<v1::NodeReport> reports(messages.size());
      for (size_t i = 0; i < messages.size(); ++i) {
        reports[i].mutable_progress()->set_message(messages[i]);
      }
      return SendReports(*nodes, holder, next.id(), std::move(reports));
    };
    auto relayed = [&]() -> std::string {
      v1::EvaluationEvent ev;
      while (reader->Read(&ev)) {
        if (ev.event_case() == v1::EvaluationEvent::kProgress) return ev.progress().message();
      }
      return "(the stream ended)";
    };
    ASSERT_TRUE(report({"building"}));
    EXPECT_EQ(relayed(), "building");
    // The scheduler records these five microseconds apart, faster than a
    // watcher wakes.
    ASSERT_TRUE(report({"pair 1", "pair 2", "pair 3", "pair 4", "pair 5"}));
    for (int i = 1; i <= 5; ++i) EXPECT_EQ(relayed(), absl::StrCat("pair ", i));
    watching.TryCancel();
    reader->Finish();
  }

  v1::SubmitResponse later;
  ASSERT_TRUE(Submit("ci-token-0001", "other", v1::CI, &later).ok());
  v1::FinishLeaseResponse rejected;
  ASSERT_TRUE(FinishWithVerdict(*nodes, holder, next, v1::REJECT, &rejected).ok());
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::FINISHED);
  ASSERT_TRUE(rejected.has_next_lease());
  const v1::Lease& after_verdict = rejected.next_lease();
  EXPECT_EQ(after_verdict.job_kind(), v1::EVALUATION);
  EXPECT_EQ(after_verdict.evaluation().id(), later.evaluation().id());
  EXPECT_GT(after_verdict.heartbeat_interval_s(), 0);
  EXPECT_EQ(Get(later.evaluation().id()).state(), v1::RUNNING);

  v1::FinishLeaseResponse idle;
  ASSERT_TRUE(FinishWithVerdict(*nodes, holder, after_verdict, v1::REJECT, &idle).ok());
  EXPECT_FALSE(idle.has_next_lease());  // The intruder's calibration is pinned to it.
  EXPECT_EQ(Get(later.evaluation().id()).state(), v1::FINISHED);
}

// An accepted candidate's verdict moves the merge queue at once: when it
// lands on a tip that moved, its re-measure is queued before the node that
// accepted it claims again, so that node takes the re-measure, not the next
// queued job (the periodic advance came too late for a claim in the reply).
TEST_P(SchedulerOnEachStore, AnAcceptOnAMovedTipQueuesItsReMeasureBeforeTheNodeClaimsAgain) {
  Git("branch trunk base");
  Branch("first", "echo '# first' >> build.sh");
  Branch("second", "echo '// second' >> checksum.h");
  Branch("other", "echo '// other' >> bench.cc");
  StartServer();
  auto nodes = NodeStub();
  const std::string node = RegisterSimulatedNode(*nodes, "simulated");
  ASSERT_FALSE(node.empty());
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, node);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::FinishLeaseResponse ignored;
  ASSERT_TRUE(FinishCalibration(*nodes, node, calibration.lease(), 0.01, false, &ignored).ok());

  auto submit = [&](const std::string& ref, const std::string& target) {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_target_branch(target);
    req.set_baseline_ref("base");
    req.set_candidate_ref(ref);
    req.set_kind(v1::EXPERIMENT);
    req.set_policy(v1::NO_REGRESSION);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    v1::SubmitResponse r;
    EXPECT_TRUE(stub_->Submit(&ctx, req, &r).ok()) << ref;
    return r.evaluation().id();
  };
  const std::string first = submit("first", "trunk");
  const std::string second = submit("second", "trunk");
  const std::string other = submit("other", "");
  // Accepts the lease's evaluation and returns the lease the reply carries.
  auto accept = [&](const v1::Lease& lease) {
    v1::FinishLeaseResponse reply;
    EXPECT_TRUE(FinishWithVerdict(*nodes, node, lease, v1::ACCEPT, &reply).ok());
    return reply.next_lease();
  };
  const v1::SynchronizeResponse work = Synchronize(*nodes, node);
  ASSERT_EQ(work.lease().evaluation().id(), first);
  // "first" was measured against the tip: it lands before the reply.
  const v1::Lease after_first = accept(work.lease());
  EXPECT_EQ(Get(first).merge().state(), v1::MERGED);
  ASSERT_EQ(after_first.evaluation().id(), second);
  // "second" was measured against base, and trunk has moved on to "first".
  const v1::Lease after_second = accept(after_first);
  const v1::Evaluation queued = Get(second);
  EXPECT_EQ(queued.merge().state(), v1::REMEASURING);
  ASSERT_FALSE(queued.merge().remeasure_evaluation_id().empty());
  EXPECT_EQ(after_second.evaluation().id(), queued.merge().remeasure_evaluation_id());
  EXPECT_EQ(after_second.evaluation().candidate().remeasure_of(), second);
  EXPECT_NE(after_second.evaluation().id(), other);
}

TEST_P(SchedulerOnEachStore, RolesAndBadRequestsGetPreciseStatuses) {
  Branch("comment", "sed -i '1i // no-op' checksum.h");
  StartServer();
  v1::SubmitResponse r;
  // An agent submits experiments only, and never overrides protected paths.
  grpc::Status s = Submit("agent-token-01", "comment", v1::CI, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_baseline_ref("base");
    req.set_candidate_ref("comment");
    req.set_kind(v1::EXPERIMENT);
    req.set_protected_path_override(true);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    EXPECT_EQ(stub_->Submit(&ctx, req, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  ASSERT_TRUE(Submit("agent-token-01", "comment", v1::EXPERIMENT, &r).ok());
  // Another agent cannot cancel it; a viewer cannot submit; no token at all
  // is unauthenticated.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-02");
    v1::CancelEvaluationRequest req;
    req.set_id(r.evaluation().id());
    v1::Evaluation e;
    EXPECT_EQ(stub_->CancelEvaluation(&ctx, req, &e).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  EXPECT_EQ(Submit("viewer-token-1", "comment", v1::EXPERIMENT, &r).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Submit("nope-nope-nope", "comment", v1::EXPERIMENT, &r).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // Bad input: a repo that does not exist, a ref that does not resolve, a
  // missing field, an unknown id.
  EXPECT_EQ(Submit("ci-token-0001", "comment", v1::CI, &r, dir_ + "/nowhere").error_code(),
            grpc::StatusCode::NOT_FOUND);
  s = Submit("ci-token-0001", "no-such-branch", v1::CI, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("no-such-branch"));
  EXPECT_EQ(Submit("ci-token-0001", "", v1::CI, &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    v1::GetEvaluationRequest req;
    req.set_id("ev-unknown");
    v1::Evaluation e;
    EXPECT_EQ(stub_->GetEvaluation(&ctx, req, &e).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // An oversized request: a hypothesis over 16 KiB is refused by the
  // scheduler, a message over 16 MiB by gRPC itself.
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_baseline_ref("base");
    req.set_candidate_ref("comment");
    req.set_kind(v1::CI);
    req.set_hypothesis(std::string(20000, 'h'));
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    v1::SubmitResponse big;
    EXPECT_EQ(stub_->Submit(&ctx, req, &big).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    req.set_hypothesis(std::string(17 << 20, 'h'));
    grpc::ClientContext huge_ctx;
    huge_ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    EXPECT_EQ(stub_->Submit(&huge_ctx, req, &big).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  // A metric scope: only metrics the baseline's manifest measures, never
  // with a target branch (a scoped evaluation cannot land), claims inside
  // it; a valid one is its own candidate, not a duplicate of the unscoped.
  {
    auto scoped = [&](const std::string& metric, const std::string& branch,
                      const std::string& claim, v1::SubmitResponse* out) {
      v1::SubmitRequest req;
      req.set_repo(repo_);
      req.set_baseline_ref("base");
      req.set_candidate_ref("comment");
      req.set_kind(v1::CI);
      req.add_metric_scope(metric);
      req.set_target_branch(branch);
      if (!claim.empty()) {
        v1::Claim* c = req.add_claims();
        c->set_metric(claim);
        c->set_min_speedup(1.1);
      }
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", "Bearer ci-token-0001");
      return stub_->Submit(&ctx, req, out);
    };
    v1::SubmitResponse unused;
    s = scoped("checksum.nope", "", "", &unused);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("it measures checksum.time"));
    EXPECT_EQ(scoped("checksum.time", "main", "", &unused).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(scoped("checksum.time", "", "other.metric", &unused).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    v1::SubmitResponse plain, scope;
    ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &plain).ok());
    ASSERT_TRUE(scoped("checksum.time", "", "", &scope).ok());
    EXPECT_FALSE(scope.deduplicated());
    EXPECT_NE(scope.evaluation().id(), plain.evaluation().id());
    EXPECT_THAT(scope.evaluation().candidate().metric_scope(), ElementsAre("checksum.time"));
  }
  // A declared precision change is part of the candidate: the same commits
  // without it are another evaluation, and the node gets the declaration.
  {
    v1::SubmitRequest req;
    req.set_repo(repo_);
    req.set_baseline_ref("base");
    req.set_candidate_ref("comment");
    req.set_kind(v1::CI);
    req.set_precision_change("fp8 kv cache");
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer ci-token-0001");
    v1::SubmitResponse declared, plain;
    ASSERT_TRUE(stub_->Submit(&ctx, req, &declared).ok());
    ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &plain).ok());
    EXPECT_NE(declared.evaluation().id(), plain.evaluation().id());
    EXPECT_EQ(declared.evaluation().candidate().precision_change(), "fp8 kv cache");
  }
  // A node finishing a lease another node holds: FAILED_PRECONDITION, and
  // the holder's lease is untouched.
  {
    auto nodes = NodeStub();
    const std::string ids[2] = {RegisterSimulatedNode(*nodes, "holder"),
                                RegisterSimulatedNode(*nodes, "intruder")};
    ASSERT_FALSE(ids[0].empty());
    ASSERT_FALSE(ids[1].empty());
    // The holder's calibration job.
    const v1::SynchronizeResponse lease = Synchronize(*nodes, ids[0]);
    ASSERT_TRUE(lease.has_lease());
    v1::FinishLeaseRequest finish;
    finish.set_node_id(ids[1]);
    finish.set_lease_id(lease.lease().id());
    finish.set_calibration_noise(0.01);
    v1::FinishLeaseResponse ignored;
    grpc::Status st =
        AsNode([&](grpc::ClientContext* c) { return nodes->FinishLease(c, finish, &ignored); });
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
    finish.set_lease_id("lease-that-never-was");
    EXPECT_NE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, finish, &ignored);
              }).error_code(),
              grpc::StatusCode::OK);
    finish.set_node_id(ids[0]);
    finish.set_lease_id(lease.lease().id());
    EXPECT_TRUE(AsNode([&](grpc::ClientContext* c) {
                  return nodes->FinishLease(c, finish, &ignored);
                }).ok());
  }
  // The submitter may cancel its own queued evaluation (no node is running).
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    v1::CancelEvaluationRequest req;
    req.set_id(r.evaluation().id());
    v1::Evaluation e;
    ASSERT_TRUE(stub_->CancelEvaluation(&ctx, req, &e).ok());
    EXPECT_EQ(e.state(), v1::CANCELLED);
  }
}

// A benchmark-only shortcut through the scheduler: the candidate's benchmark
// binary times the checksum 2x faster while the trusted runner's timing of
// the same op does not move. A node whose gate ignores the manifest's
// confirmed_by link reports ACCEPT; the scheduler decides with the link:
// REJECT, BENCHMARK_ONLY_GAIN, and the node is quarantined.
TEST_F(SchedulerTest, ANodeThatDropsAConfirmerIsDecidedByTheManifest) {
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(repo_ + "/densegate.json"));
  manifest["kernel_checks"] = nlohmann::json::array(
      {nlohmann::json::parse(std::ifstream(repo_ + "/timed_check.json"))});
  manifest["benchmarks"][0]["metrics"][0]["confirmed_by"] = "checksum.runner";
  std::ofstream(repo_ + "/densegate.json") << manifest.dump(2);
  Commit("the benchmark metric is confirmed by the runner metric");
  Git("tag -f base");
  Branch("shortcut", "echo '// only the benchmark is faster' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  const std::string node = RegisterSimulatedNode(*nodes, "lax");
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, node);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitRequest req;
  req.set_repo(repo_);
  req.set_baseline_ref("base");
  req.set_candidate_ref("shortcut");
  req.set_kind(v1::EXPERIMENT);
  req.set_policy(v1::GAIN);
  v1::SubmitResponse queued;
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer agent-token-01");
    ASSERT_TRUE(stub_->Submit(&ctx, req, &queued).ok());
  }
  v1::FinishLeaseResponse next;
  ASSERT_TRUE(FinishCalibration(*nodes, node, calibration.lease(), 0.01, true, &next).ok());
  ASSERT_TRUE(next.has_next_lease());
  const v1::Lease lease = next.next_lease();
  ASSERT_EQ(lease.evaluation().id(), queued.evaluation().id());

  // 30 pairs (the manifest's budget), within half a percent of: benchmark
  // 100 ns baseline, 50 candidate; runner 1000 ns in both arms.
  std::vector<v1::Sample> samples;
  for (int pair = 0; pair < 30; ++pair) {
    const double wobble = 1 + 0.005 * ((pair * 7) % 5 - 2) / 2.0;
    for (auto [metric, base, cand] : {std::tuple{"checksum.time", 100.0, 50.0},
                                      std::tuple{"checksum.runner", 1000.0, 1000.0}}) {
      for (v1::Arm arm : {v1::BASELINE, v1::CANDIDATE}) {
        v1::Sample& s = samples.emplace_back();
        s.set_evaluation_id(lease.evaluation().id());
        s.set_metric(metric);
        s.set_arm(arm);
        s.set_pair_index(pair);
        s.set_unit("ns");
        s.set_value((arm == v1::BASELINE ? base : cand) *
                    (arm == v1::BASELINE ? wobble : 2 - wobble));
      }
    }
  }
  std::vector<v1::NodeReport> reports(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) *reports[i].mutable_sample() = samples[i];
  ASSERT_TRUE(SendReports(*nodes, node, lease.id(), std::move(reports)));
  // The lax node's gate: both metrics, the link left out.
  std::vector<results::MetricSamples> described(2);
  for (int i = 0; i < 2; ++i) {
    described[i].name = i == 0 ? "checksum.time" : "checksum.runner";
    described[i].unit = "ns";
    described[i].direction = v1::LOWER_IS_BETTER;
    described[i].primary = true;
    described[i].stage = v1::MICROBENCHMARK;
  }
  v1::GatePolicy gate;
  gate.set_min_effect(0.02);
  gate.set_regression_budget(0.10);
  gate.set_min_pairs(6);
  gate.set_max_pairs(30);
  v1::FinishLeaseRequest finish;
  finish.set_node_id(node);
  finish.set_lease_id(lease.id());
  *finish.mutable_verdict() = results::testing::VerdictFromSamples(
      lease.evaluation().id(), v1::GAIN, gate, described, samples);
  ASSERT_EQ(finish.verdict().decision(), v1::ACCEPT);
  v1::FinishLeaseResponse ignored;
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, finish, &ignored);
              }).ok());
  const v1::Evaluation done = Get(queued.evaluation().id());
  EXPECT_EQ(done.verdict().decision(), v1::REJECT);
  bool named = false;
  for (const v1::Reason& r : done.verdict().reasons()) named |= r.code() == v1::BENCHMARK_ONLY_GAIN;
  EXPECT_TRUE(named) << done.verdict().DebugString();
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer viewer-token-1");
  v1::ListNodesRequest list;
  v1::ListNodesResponse listed;
  ASSERT_TRUE(stub_->ListNodes(&ctx, list, &listed).ok());
  for (const v1::Node& n : listed.nodes()) {
    if (n.id() == node) {
      EXPECT_EQ(n.state(), v1::DISTRUSTED);
    }
  }
}

// Noise leaves an evaluation inconclusive: its second part is queued once,
// with the error budget the first part kept, for a calm node of the same
// kind, carrying the first part's samples; it looks at 36 to 60 pooled
// pairs, and its verdict is the one that counts (continued_by). Its own
// inconclusive verdict would not be continued again.
TEST_F(SchedulerTest, AnEvaluationNoiseLeftInconclusiveIsContinuedOnceOnACalmNode) {
  Branch("comment", "echo '// a comment' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  const std::string node = RegisterSimulatedNode(*nodes, "calm");
  const v1::SynchronizeResponse calibration = Synchronize(*nodes, node);
  ASSERT_EQ(calibration.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());
  EXPECT_EQ(queued.evaluation().candidate().error_share(), 0.9);
  v1::FinishLeaseResponse next;
  ASSERT_TRUE(FinishCalibration(*nodes, node, calibration.lease(), 0.01, true, &next).ok());
  ASSERT_TRUE(next.has_next_lease());
  const v1::Lease first = next.next_lease();

  // Per pair, a candidate/baseline ratio; the verdict the node reports
  // from pairs [0, pairs.size()) under `gate`.
  v1::GatePolicy gate;  // The fixture's.
  gate.set_min_effect(0.02);
  gate.set_regression_budget(0.10);
  gate.set_min_pairs(6);
  gate.set_max_pairs(30);
  auto run = [&](const v1::Lease& lease, const std::vector<double>& log_ratios, double share,
                 bool second_part) {
    std::vector<v1::Sample> samples;
    for (size_t pair = 0; pair < log_ratios.size(); ++pair) {
      for (v1::Arm arm : {v1::BASELINE, v1::CANDIDATE}) {
        v1::Sample& smp = samples.emplace_back();
        smp.set_evaluation_id(lease.evaluation().id());
        smp.set_metric("checksum.time");
        smp.set_arm(arm);
        smp.set_pair_index(pair);
        smp.set_unit("ns");
        smp.set_value(arm == v1::BASELINE ? 100 : 100 * std::exp(log_ratios[pair]));
      }
    }
    std::vector<v1::NodeReport> reports(samples.size());
    for (size_t i = 0; i < samples.size(); ++i) *reports[i].mutable_sample() = samples[i];
    EXPECT_TRUE(SendReports(*nodes, node, lease.id(), std::move(reports)));
    std::vector<results::MetricSamples> described(1);
    described[0].name = "checksum.time";
    described[0].unit = "ns";
    described[0].direction = v1::LOWER_IS_BETTER;
    described[0].primary = true;
    described[0].stage = v1::MICROBENCHMARK;
    v1::FinishLeaseRequest finish;
    finish.set_node_id(node);
    finish.set_lease_id(lease.id());
    *finish.mutable_verdict() = results::testing::VerdictFromSamples(
        lease.evaluation().id(), v1::NO_REGRESSION, gate, described, samples, share, second_part);
    v1::FinishLeaseResponse ignored;
    EXPECT_TRUE(AsNode([&](grpc::ClientContext* c) {
                  return nodes->FinishLease(c, finish, &ignored);
                }).ok());
    return finish.verdict().decision();
  };
  // 30 pairs spread over +-60%: a 10% slowdown cannot be ruled out.
  std::vector<double> noisy;
  for (int pair = 0; pair < 30; ++pair) noisy.push_back(0.6 * (((pair * 11) % 30) / 14.5 - 1));
  ASSERT_EQ(run(first, noisy, 0.9, false), v1::INCONCLUSIVE);
  const v1::Evaluation first_done = Get(queued.evaluation().id());
  ASSERT_EQ(first_done.verdict().decision(), v1::INCONCLUSIVE)
      << first_done.verdict().DebugString();
  ASSERT_FALSE(first_done.continued_by().empty());
  EXPECT_EQ(Get(queued.evaluation().id()).continued_by(), first_done.continued_by());  // Once.
  const v1::Evaluation second = Get(first_done.continued_by());
  EXPECT_EQ(second.state(), v1::QUEUED);
  EXPECT_EQ(second.candidate().continues(), queued.evaluation().id());
  EXPECT_EQ(second.candidate().error_share(), 0.1);
  EXPECT_EQ(second.candidate().candidate_sha(), first_done.candidate().candidate_sha());

  const v1::SynchronizeResponse claimed = Synchronize(*nodes, node);
  ASSERT_EQ(claimed.lease().evaluation().id(), second.id());
  EXPECT_EQ(claimed.lease().prior().evaluation_id(), queued.evaluation().id());
  EXPECT_EQ(claimed.lease().prior().samples_size(), 60);  // 30 pairs, two arms.
  // The first part's pairs and 30 calm ones: decided at a pooled look.
  std::vector<double> pooled = noisy;
  for (int pair = 0; pair < 30; ++pair) pooled.push_back(0.002 * ((pair % 5) - 2));
  EXPECT_EQ(run(claimed.lease(), pooled, 0.1, true), v1::ACCEPT);
  const v1::Evaluation second_done = Get(second.id());
  EXPECT_EQ(second_done.verdict().decision(), v1::ACCEPT) << second_done.verdict().DebugString();
  EXPECT_TRUE(second_done.continued_by().empty());
  EXPECT_EQ(second_done.verdict().provenance().policy_parameters().max_pairs(), 60);
  EXPECT_TRUE(second_done.verdict().provenance().second_part());
  EXPECT_EQ(second_done.verdict().provenance().error_share(), 0.1);
}

// Node tokens are per node: one acts only as its own node, other roles
// cannot finish a lease at all (a forged FinishLease), and a revoked token
// stops working while the server runs. What a node reports as its verdict
// is checked: the scheduler stores the gate's decision from what the node
// measured, and distrusts a node whose verdict contradicts it, for good.
TEST_P(SchedulerOnEachStore, NodeTokensActOnlyAsTheirNodeAndTheSchedulerDecides) {
  Branch("comment", "echo '// a comment' >> checksum.h");
  StartServer();
  auto nodes = NodeStub();
  const std::string honest = NodeToken("honest");
  v1::RegisterNodeRequest reg;
  reg.mutable_dimensions()->set_accelerator_kind("cpu");
  reg.mutable_dimensions()->set_fingerprint("test");
  v1::RegisterNodeResponse registered;
  reg.set_name("someone-else");
  grpc::Status st = AsNode(
      [&](grpc::ClientContext* c) { return nodes->RegisterNode(c, reg, &registered); }, honest);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  reg.set_name("honest");
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->RegisterNode(c, reg, &registered);
              }, honest).ok());
  const std::string node = registered.node_id();
  const std::string other = RegisterSimulatedNode(*nodes, "other");
  ASSERT_FALSE(other.empty());
  // Its token cannot poll, beat or finish for another node.
  v1::SynchronizeRequest sync;
  sync.set_node_id(other);
  v1::SynchronizeResponse work;
  EXPECT_EQ(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                   honest).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Calibrated, then it leases the queued candidate.
  sync.set_node_id(node);
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                     honest).ok());
  ASSERT_EQ(work.lease().job_kind(), v1::CALIBRATION);
  v1::SubmitResponse queued;
  ASSERT_TRUE(Submit("ci-token-0001", "comment", v1::CI, &queued).ok());
  v1::FinishLeaseResponse next;
  ASSERT_TRUE(FinishCalibration(*nodes, node, work.lease(), 0.01, true, &next, honest).ok());
  ASSERT_TRUE(next.has_next_lease());
  const v1::Lease lease = next.next_lease();

  // A CI or agent token cannot finish it, whatever it claims.
  v1::FinishLeaseRequest forged;
  forged.set_node_id(node);
  forged.set_lease_id(lease.id());
  const v1::Candidate& c = lease.evaluation().candidate();
  *forged.mutable_verdict() = results::testing::VerdictWithoutSamples(
      lease.evaluation().id(), results::EffectivePolicy(c.policy(), c.kind()), v1::REJECT);
  // The verdict's reasons say a correctness stage failed; it claims ACCEPT.
  forged.mutable_verdict()->set_decision(v1::ACCEPT);
  v1::FinishLeaseResponse ignored;
  for (const char* token : {"ci-token-0001", "agent-token-01", "viewer-token-1"}) {
    EXPECT_EQ(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, forged, &ignored);
              }, token).error_code(),
              grpc::StatusCode::PERMISSION_DENIED)
        << token;
  }
  EXPECT_EQ(Get(queued.evaluation().id()).state(), v1::RUNNING);

  // The node itself sends it: stored is the gate's decision (REJECT, for
  // the failed stage its own verdict names), and the node is distrusted.
  ASSERT_TRUE(AsNode([&](grpc::ClientContext* c) {
                return nodes->FinishLease(c, forged, &ignored);
              }, honest).ok());
  const v1::Evaluation done = Get(queued.evaluation().id());
  EXPECT_EQ(done.state(), v1::FINISHED);
  EXPECT_EQ(done.verdict().decision(), v1::REJECT);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer viewer-token-1");
    v1::ListNodesRequest req;
    v1::ListNodesResponse listed;
    ASSERT_TRUE(stub_->ListNodes(&ctx, req, &listed).ok());
    bool found = false;
    for (const v1::Node& n : listed.nodes()) {
      if (n.id() != node) continue;
      found = true;
      EXPECT_EQ(n.state(), v1::DISTRUSTED);
    }
    EXPECT_TRUE(found);
  }
  // It is told so, and gets no work back: not by recalibrating, not after
  // the scheduler restarts, not by registering again as other hardware.
  sync.set_wait_s(0);
  auto refused = [&](const grpc::Status& s) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr("is distrusted"));
  };
  work.Clear();
  refused(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                 honest));
  EXPECT_FALSE(work.has_lease());
  server_->Kill();
  StartServer(30, address_);
  nodes = NodeStub();
  reg.mutable_dimensions()->set_fingerprint("other hardware");
  refused(AsNode([&](grpc::ClientContext* c) { return nodes->RegisterNode(c, reg, &registered); },
                 honest));
  work.Clear();
  refused(AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                 honest));
  EXPECT_FALSE(work.has_lease());

  // Revoked with `densegate token revoke`, the token stops working without
  // a restart (the server looks at the file at most once a second).
  Sh(Runfile("cli/densegate") + " token revoke honest --tokens " + dir_ + "/tokens 2>/dev/null");
  grpc::StatusCode code = grpc::StatusCode::OK;
  WaitFor(
      [&] {
        code = AsNode([&](grpc::ClientContext* c) { return nodes->Synchronize(c, sync, &work); },
                      honest)
                   .error_code();
        return code == grpc::StatusCode::UNAUTHENTICATED;
      },
      absl::Seconds(5));
  EXPECT_EQ(code, grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace densegate
