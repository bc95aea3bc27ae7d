// The scheduler and its nodes as real processes on loopback: `densegate
// serve` on port 0 over each store (SQLite, and PostgreSQL with
// DENSEGATE_PG_URL) and `densegate node` workers evaluating commits of the
// tiny fixture workload in their sandboxes. Only what needs processes is
// here: a node and the scheduler killed with SIGKILL, a restart, TLS, and
// what a node's sandboxes leave behind; every other scenario runs in one
// process with scripted nodes (scheduler_scenarios_test.cc).
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "platform/process/service_process.h"
#include "tests/scheduler_fixture.h"

namespace densegate::test {
namespace {

using platform::ServiceProcess;

// A process of the test, in its own process group with its output in `log`.
std::unique_ptr<ServiceProcess> StartProcess(const std::vector<std::string>& argv,
                                             const std::string& log) {
  absl::StatusOr<std::unique_ptr<ServiceProcess>> p = ServiceProcess::Start(argv, log);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

class SchedulerProcesses : public SchedulerFixture {
 protected:
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
    server_ = StartProcess(argv, dir_ + "/serve.log");
    // Wait for the port file (written once the server listens).
    WaitFor([&] { return std::ifstream(port_file).good(); }, absl::Seconds(30));
    int port = 0;
    int http_port = 0;
    std::ifstream(port_file) >> port >> http_port;
    ASSERT_GT(port, 0) << "the server did not start; see " << dir_ << "/serve.log";
    Connect(port, http_port);
  }

  std::unique_ptr<ServiceProcess> StartNode(const std::string& name,
                                   const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {Runfile("cli/densegate"), "node", "--server", address_,
                                     "--token", NodeToken(name), "--name", name, "--workspace",
                                     dir_ + "/ws-" + name};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return StartProcess(argv, dir_ + "/" + name + ".log");
  }

  std::unique_ptr<ServiceProcess> server_;
};

using SchedulerProcessesOnEachStore = OnEachStore<SchedulerProcesses>;

INSTANTIATE_TEST_SUITE_P(Stores, SchedulerProcessesOnEachStore,
                         ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST_P(SchedulerProcessesOnEachStore, ANodeKilledMidJobLosesItsLeaseAndAnotherFinishes) {
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
  // The node that finished uploaded what its evaluation wrote: the real
  // build's logs and each stage's time.
  Feedback feedback;
  grpc::Status st = GetFeedback(e.id(), /*summary_only=*/false, &feedback);
  ASSERT_TRUE(st.ok()) << st.error_message();
  const nlohmann::json summary = nlohmann::json::parse(feedback.info.summary_json());
  EXPECT_EQ(summary["evaluation_id"], e.id());
  EXPECT_EQ(summary["decision"], "accept");
  ASSERT_TRUE(summary["stages"].is_array());
  EXPECT_EQ(summary["stages"][1]["name"], "build");
  EXPECT_GT(summary["stages"][1]["seconds"].get<double>(), 0);
  EXPECT_EQ(feedback.files.count("logs/build-candidate.err"), 1);
  EXPECT_EQ(feedback.files.count("stages.json"), 1);
}

// Three candidates, one node; the scheduler is killed with one running and
// two queued, restarted on the same store, and every verdict arrives once.
TEST_P(SchedulerProcessesOnEachStore, SchedulerKilledAndRestartedLosesNoVerdict) {
  // The comment leaves the benchmark's inputs as they were: decided without
  // pairs, so that the time goes to the restart, not to measuring.
  Sh("sed -i 's|\"timeout_s\": 60,|\"timeout_s\": 60, \"skip_when_identical\": true,|' " +
     repo_ + "/densegate.json");
  Git("commit -q -am 'compare the benchmark inputs'");
  Git("tag -f base");
  Branch("fast", kFast);
  Branch("comment", "echo '# no-op' >> build.sh");
  Branch("wrong", "sed -i 's/1000000007ULL/1000000009ULL/' checksum.h");
  // A lease long enough to outlast the restart: the running candidate must
  // finish on its first attempt (its node reopens the report stream that
  // the kill broke), not expire and run again.
  StartServer(/*lease_s=*/15);
  std::vector<std::string> ids;
  for (const char* ref : {"fast", "comment", "wrong"}) {
    v1::SubmitResponse r;
    ASSERT_TRUE(Submit("ci-token-0001", ref, v1::CI, &r).ok());
    ids.push_back(r.evaluation().id());
  }
  auto node = StartNode("survivor");
  WaitDone(ids[0], v1::RUNNING);
  server_->Kill();  // kill -9 with one job running and two queued.
  StartServer(/*lease_s=*/15, address_);
  for (const std::string& id : ids) {
    v1::Evaluation e = WaitDone(id);
    EXPECT_EQ(e.state(), v1::FINISHED) << id;
    EXPECT_NE(e.verdict().decision(), v1::DECISION_UNSPECIFIED) << id;
    EXPECT_EQ(e.attempt(), 1) << id << " ran again after the restart";
  }
  EXPECT_EQ(Get(ids[2]).verdict().decision(), v1::REJECT);
}

// Whatever a node's arms leave running (Bazel leaves its server, detached
// in a session of its own) ends with the node: the candidate's with its
// evaluation, the baseline's, whose sandbox lives on for its Bazel server,
// when the node is stopped (each sandbox is a PID namespace that dies with
// its parent).
TEST_F(SchedulerProcesses, NothingANodesArmsStartOutlivesTheNode) {
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

TEST_F(SchedulerProcesses, TlsServesOnlyEncryptedClientsAndNodes) {
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

}  // namespace
}  // namespace densegate::test
