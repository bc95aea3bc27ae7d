// End-to-end dispatch rate and heartbeat latency of `densegate serve`: an
// in-process scheduler on a loopback port, simulated nodes speaking the
// node protocol over gRPC, the store on SQLite (always) or PostgreSQL (with
// DENSEGATE_PG_URL).
//
//   bazel run -c opt //scheduler:dispatch_bench
//   eval "$(tools/pg_cluster.sh start)" && bazel run -c opt //scheduler:dispatch_bench
//
// BM_Dispatch: N node threads each loop over leases, finishing each with a
// verdict; items_per_second is dispatches per second, all nodes together (a
// lease is durable in the store when the reply that carries it arrives).
// Two ways to get the next lease, side by side: `synchronize` (FinishLease,
// then Synchronize: two round trips per job) and `claim_next` (FinishLease
// with claim_next, whose reply carries the next lease: one round trip, what
// `densegate node` does). The queue is filled through the store before
// timing. CPU per dispatch: cpu_us for this process (scheduler, gRPC, store
// client and the simulated nodes together), db_us for the PostgreSQL
// backends (0 for SQLite, whose work is in cpu_us), and cpu_bound_2core =
// 2 s / (cpu_us + db_us), the rate two otherwise idle cores would carry if CPU
// were the only limit; `db_cores`, the PostgreSQL backends' CPU seconds per
// second of the run (about 0.9 says the one pipelined backend that runs the
// finish-and-claim statements is what sets the pace, see
// scheduler/README.md, "What sets the rate"); `switches` counts this
// process's context switches per dispatch (its threads' wake-ups); on
// PostgreSQL, `leases_per_statement` is how many nodes a finish-and-claim
// statement served on average (Store::finish_batch_counts).
//
// BM_RpcFloor: what the RPC layer alone allows on this machine, for reading
// the dispatch rate against. The same closed loop from N client threads to
// a server with the scheduler's builder settings whose handlers do nothing
// (scheduler/rpc_floor.proto): unary calls on the sync API (the one the
// scheduler uses) and on the callback API, and messages on one open
// bidirectional stream per thread (sync API), side by side; cpu_us is the
// process's CPU time (client and server together) per call or message.
//
// BM_Heartbeats: 1,000 nodes, each holding a lease and heartbeating every
// 10 s (100 beats/s, spread evenly, open loop from 8 sender threads) for
// 20 s; counters are the latency percentiles of the Heartbeat RPC in ms.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "grpcpp/grpcpp.h"
#include "proto/densegate.grpc.pb.h"
#include "results/store/store.h"
#include "results/store/testing/test_database.h"
#include "results/verdict/testing/verdicts.h"
#include "scheduler/rpc_floor.grpc.pb.h"
#include "scheduler/server.h"

namespace densegate::scheduler {
namespace {

struct Fixture {
  std::unique_ptr<results::testing::TestDatabase> db;
  std::unique_ptr<SchedulerServer> server;
  results::Store* store = nullptr;  // Owned by `server`.
  std::shared_ptr<grpc::Channel> channel;
  std::vector<std::string> node_ids;
  // BM_RpcFloor's no-op server, in place of `db` and `server`.
  std::unique_ptr<grpc::Service> noop_service;
  std::unique_ptr<grpc::Server> noop_server;
};

// Kept until every benchmark has run (benchmark threads may still use one
// after thread 0 returns); main then drops them, and with them their
// PostgreSQL databases: left behind, their dead rows kept autovacuum busy
// during later runs (one such run: 481 dispatches/s, against 752 and 881
// right after the leftovers were dropped).
std::vector<std::unique_ptr<Fixture>>& Fixtures() {
  static auto* all = new std::vector<std::unique_ptr<Fixture>>();
  return *all;
}
Fixture* g_fixture = nullptr;

results::SubmitParams Job(int i) {
  results::SubmitParams p;
  v1::Candidate& c = p.candidate;
  c.set_id(absl::StrFormat("dispatch-%08d", i));
  c.set_repo("https://git.example/densegate.git");
  c.set_baseline_sha("b0b0b0b0");
  c.set_candidate_sha(absl::StrFormat("c%08d", i));
  c.set_kind(i % 4 == 0 ? v1::EXPERIMENT : v1::CI);
  c.set_submitter("bench");
  c.set_manifest_hash("m");
  return p;
}

// A rejection for a failed stage, as a node reports it: the scheduler decides
// again (no samples to read) and stores the same.
v1::Verdict Verdict(const v1::Lease& lease) {
  const v1::Candidate& c = lease.evaluation().candidate();
  return results::testing::VerdictWithoutSamples(
      lease.evaluation().id(), results::EffectivePolicy(c.policy(), c.kind()), v1::REJECT);
}

// A fresh store with `jobs` queued, a scheduler serving it, and `nodes`
// registered and calibrated nodes. Null (and the state skipped) on error.
Fixture* Setup(benchmark::State& state, bool postgres, int nodes, int jobs,
               absl::Duration lease) {
  auto f = std::make_unique<Fixture>();
  const std::string name = absl::StrCat("dispatch_", postgres ? "pg_" : "sqlite_", nodes);
  auto db = postgres ? results::testing::TestDatabase::CreatePostgres(
                           results::testing::PostgresUrlFromEnv(), name)
                     : results::testing::TestDatabase::CreateSqlite(name);
  if (!db.ok()) {
    state.SkipWithError(std::string(db.status().message()).c_str());
    return nullptr;
  }
  f->db = *std::move(db);
  {
    absl::StatusOr<std::unique_ptr<results::Store>> filler = results::OpenStore(f->db->url());
    if (!filler.ok()) {
      state.SkipWithError(std::string(filler.status().message()).c_str());
      return nullptr;
    }
    for (int i = 0; i < jobs; ++i) {
      if (!(*filler)->Submit(Job(i)).ok()) {
        state.SkipWithError("filling the queue failed");
        return nullptr;
      }
    }
  }
  absl::StatusOr<std::unique_ptr<results::Store>> store = results::OpenStore(f->db->url());
  if (!store.ok()) {
    state.SkipWithError(std::string(store.status().message()).c_str());
    return nullptr;
  }
  f->store = store->get();
  ServerOptions options;
  options.address = "127.0.0.1:0";
  options.scheduler.lease_duration = lease;
  absl::StatusOr<std::unique_ptr<SchedulerServer>> server =
      SchedulerServer::Start(options, *std::move(store));
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return nullptr;
  }
  f->server = *std::move(server);
  f->channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", f->server->port()),
                                   grpc::InsecureChannelCredentials());
  auto stub = v1::NodeService::NewStub(f->channel);
  for (int n = 0; n < nodes; ++n) {
    v1::RegisterNodeRequest reg;
    reg.set_name(absl::StrCat("sim-", n));
    reg.mutable_dimensions()->set_accelerator_kind("cpu");
    reg.mutable_dimensions()->set_fingerprint("bench");
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    if (!stub->RegisterNode(&ctx, reg, &resp).ok()) {
      state.SkipWithError("RegisterNode failed");
      return nullptr;
    }
    // Calibrate: the first lease of a new node is its calibration job.
    v1::SynchronizeRequest sync;
    sync.set_node_id(resp.node_id());
    v1::SynchronizeResponse lease;
    grpc::ClientContext sync_ctx;
    if (!stub->Synchronize(&sync_ctx, sync, &lease).ok() || !lease.has_lease()) {
      state.SkipWithError("no calibration lease");
      return nullptr;
    }
    v1::FinishLeaseRequest done;
    done.set_node_id(resp.node_id());
    done.set_lease_id(lease.lease().id());
    done.set_calibration_noise(0.001);
    v1::FinishLeaseResponse ignored;
    grpc::ClientContext done_ctx;
    if (!stub->FinishLease(&done_ctx, done, &ignored).ok()) {
      state.SkipWithError("finishing calibration failed");
      return nullptr;
    }
    f->node_ids.push_back(resp.node_id());
  }
  Fixtures().push_back(std::move(f));
  return Fixtures().back().get();
}

// This process's usage so far, all threads: CPU seconds, and the times its
// threads were switched out, waiting (voluntary) or preempted. Each switch is
// a wake-up to pay for: on the 2-core virtual machine these figures come
// from, much of a dispatch's kernel time.
struct ProcessUsage {
  double cpu_seconds = 0;
  double switches = 0;
};

ProcessUsage ReadProcessUsage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6,
          static_cast<double>(u.ru_nvcsw + u.ru_nivcsw)};
}

void BM_Dispatch(benchmark::State& state, bool postgres, bool claim_next) {
  if (postgres && results::testing::PostgresUrlFromEnv().empty()) {
    state.SkipWithError("DENSEGATE_PG_URL not set: eval \"$(tools/pg_cluster.sh start)\"");
    return;
  }
  ProcessUsage usage_start;
  double db_cpu_start = 0;
  absl::Time wall_start;
  results::FinishBatchCounts batches_start;
  if (state.thread_index() == 0) {
    g_fixture = Setup(state, postgres, state.threads(), static_cast<int>(state.range(0)),
                      absl::Minutes(10));
    if (g_fixture != nullptr) {
      db_cpu_start = g_fixture->db->BackendCpuSeconds();
      batches_start = g_fixture->store->finish_batch_counts();
      usage_start = ReadProcessUsage();
      wall_start = absl::Now();
    }
  }
  int64_t dispatched = 0;
  std::unique_ptr<v1::NodeService::Stub> stub;
  std::optional<v1::Lease> held;  // Claimed by the last finish.
  for (auto _ : state) {
    Fixture* f = g_fixture;
    if (f == nullptr) {
      state.SkipWithError("setup failed");
      break;
    }
    if (stub == nullptr) stub = v1::NodeService::NewStub(f->channel);
    const std::string& node = f->node_ids[state.thread_index()];
    v1::Lease lease;
    if (held.has_value()) {
      lease = *std::move(held);
      held.reset();
    } else {
      v1::SynchronizeRequest sync;
      sync.set_node_id(node);
      v1::SynchronizeResponse synced;
      grpc::ClientContext sync_ctx;
      grpc::Status s = stub->Synchronize(&sync_ctx, sync, &synced);
      if (!s.ok() || !synced.has_lease()) {
        state.SkipWithError(s.ok() ? "queue ran dry" : s.error_message().c_str());
        break;
      }
      lease = synced.lease();
    }
    ++dispatched;
    v1::FinishLeaseRequest done;
    done.set_node_id(node);
    done.set_lease_id(lease.id());
    *done.mutable_verdict() = Verdict(lease);
    done.set_claim_next(claim_next);
    v1::FinishLeaseResponse finished;
    grpc::ClientContext done_ctx;
    grpc::Status s = stub->FinishLease(&done_ctx, done, &finished);
    if (!s.ok()) {
      state.SkipWithError(s.error_message().c_str());
      break;
    }
    if (finished.has_next_lease()) held = finished.next_lease();
  }
  state.SetItemsProcessed(dispatched);
  if (state.thread_index() == 0 && g_fixture != nullptr) {
    // Thread 0 finishes with the others (the loop's end is a barrier).
    const double dispatches = static_cast<double>(state.iterations()) * state.threads();
    const ProcessUsage usage = ReadProcessUsage();
    const double cpu_us = (usage.cpu_seconds - usage_start.cpu_seconds) * 1e6 / dispatches;
    const double db_seconds = g_fixture->db->BackendCpuSeconds() - db_cpu_start;
    const double db_us = db_seconds * 1e6 / dispatches;
    state.counters["cpu_us"] = cpu_us;
    state.counters["switches"] = (usage.switches - usage_start.switches) / dispatches;
    state.counters["db_us"] = db_us;
    state.counters["cpu_bound_2core"] = 2e6 / (cpu_us + db_us);
    state.counters["db_cores"] = db_seconds / absl::ToDoubleSeconds(absl::Now() - wall_start);
    const results::FinishBatchCounts batches = g_fixture->store->finish_batch_counts();
    if (batches.statements > batches_start.statements) {
      state.counters["leases_per_statement"] =
          static_cast<double>(batches.leases - batches_start.leases) /
          static_cast<double>(batches.statements - batches_start.statements);
    }
  }
}

// BM_RpcFloor's servers: every call and every stream message is answered
// at once, with nothing done.
class SyncFloor final : public bench::Floor::Service {
  grpc::Status Echo(grpc::ServerContext*, const bench::Ping*, bench::Pong*) override {
    return grpc::Status::OK;
  }
  grpc::Status EchoStream(grpc::ServerContext*,
                          grpc::ServerReaderWriter<bench::Pong, bench::Ping>* stream) override {
    bench::Ping ping;
    while (stream->Read(&ping)) {
      if (!stream->Write(bench::Pong())) break;
    }
    return grpc::Status::OK;
  }
};

class CallbackFloor final : public bench::Floor::CallbackService {
  grpc::ServerUnaryReactor* Echo(grpc::CallbackServerContext* ctx, const bench::Ping*,
                                 bench::Pong*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

enum class FloorCall { kSyncUnary, kCallbackUnary, kSyncStream };

void BM_RpcFloor(benchmark::State& state, FloorCall call) {
  double cpu_start = 0;
  if (state.thread_index() == 0) {
    auto f = std::make_unique<Fixture>();
    if (call == FloorCall::kCallbackUnary) {
      f->noop_service = std::make_unique<CallbackFloor>();
    } else {
      f->noop_service = std::make_unique<SyncFloor>();
    }
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    ApplyServerSettings(builder);
    builder.RegisterService(f->noop_service.get());
    f->noop_server = builder.BuildAndStart();
    g_fixture = nullptr;
    if (f->noop_server == nullptr) {
      state.SkipWithError("the server did not start");
    } else {
      f->channel =
          grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
      Fixtures().push_back(std::move(f));
      g_fixture = Fixtures().back().get();
      cpu_start = ReadProcessUsage().cpu_seconds;
    }
  }
  std::unique_ptr<bench::Floor::Stub> stub;
  // kSyncStream: this thread's stream, opened on its first iteration.
  grpc::ClientContext stream_ctx;
  std::unique_ptr<grpc::ClientReaderWriter<bench::Ping, bench::Pong>> stream;
  bench::Ping ping;
  ping.set_node_id("node");
  ping.set_lease_id("lease");
  for (auto _ : state) {
    if (g_fixture == nullptr) {
      state.SkipWithError("setup failed");
      break;
    }
    if (stub == nullptr) stub = bench::Floor::NewStub(g_fixture->channel);
    bench::Pong pong;
    if (call == FloorCall::kSyncStream) {
      if (stream == nullptr) stream = stub->EchoStream(&stream_ctx);
      if (!stream->Write(ping) || !stream->Read(&pong)) {
        state.SkipWithError("the stream broke");
        break;
      }
      continue;
    }
    grpc::ClientContext ctx;
    if (grpc::Status s = stub->Echo(&ctx, ping, &pong); !s.ok()) {
      state.SkipWithError(s.error_message().c_str());
      break;
    }
  }
  if (stream != nullptr) {
    stream->WritesDone();
    if (grpc::Status s = stream->Finish(); !s.ok()) state.SkipWithError(s.error_message().c_str());
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0 && g_fixture != nullptr) {
    // Thread 0 finishes with the others (the loop's end is a barrier).
    state.counters["cpu_us"] = benchmark::Counter((ReadProcessUsage().cpu_seconds - cpu_start) *
                                                  1e6 / (state.iterations() * state.threads()));
    g_fixture->noop_server->Shutdown();
  }
}

void BM_Heartbeats(benchmark::State& state, bool postgres) {
  if (postgres && results::testing::PostgresUrlFromEnv().empty()) {
    state.SkipWithError("DENSEGATE_PG_URL not set: eval \"$(tools/pg_cluster.sh start)\"");
    return;
  }
  constexpr int kNodes = 1000, kSenders = 8;
  const absl::Duration period = absl::Seconds(10), run = absl::Seconds(20);
  Fixture* f = Setup(state, postgres, kNodes, kNodes, absl::Minutes(10));
  if (f == nullptr) return;
  // Every node takes one job, so each beat renews a lease in the store.
  auto stub = v1::NodeService::NewStub(f->channel);
  std::vector<std::string> leases(kNodes);
  for (int n = 0; n < kNodes; ++n) {
    v1::SynchronizeRequest sync;
    sync.set_node_id(f->node_ids[n]);
    v1::SynchronizeResponse lease;
    grpc::ClientContext ctx;
    if (!stub->Synchronize(&ctx, sync, &lease).ok() || !lease.has_lease()) {
      state.SkipWithError("a node got no lease");
      return;
    }
    leases[n] = lease.lease().id();
  }
  std::vector<double> latencies_ms;
  std::atomic<int> errors{0};
  for (auto _ : state) {
    // Node n beats at start + (n / kNodes + k) * period: evenly spread.
    const absl::Time start = absl::Now();
    std::vector<std::vector<double>> per_sender(kSenders);
    std::vector<std::thread> senders;
    for (int t = 0; t < kSenders; ++t) {
      senders.emplace_back([&, t] {
        auto own = v1::NodeService::NewStub(f->channel);
        const int64_t beats = kNodes * (run / period);
        for (int64_t b = t; b < beats; b += kSenders) {
          const int n = static_cast<int>(b % kNodes);
          const absl::Time due = start + period * (static_cast<double>(b) / kNodes);
          absl::SleepFor(due - absl::Now());
          v1::HeartbeatRequest hb;
          hb.set_node_id(f->node_ids[n]);
          hb.set_lease_id(leases[n]);
          v1::HeartbeatResponse resp;
          grpc::ClientContext ctx;
          const absl::Time sent = absl::Now();
          if (!own->Heartbeat(&ctx, hb, &resp).ok() || resp.cancel()) ++errors;
          per_sender[t].push_back(absl::ToDoubleMilliseconds(absl::Now() - sent));
        }
      });
    }
    for (std::thread& s : senders) s.join();
    for (const auto& v : per_sender) latencies_ms.insert(latencies_ms.end(), v.begin(), v.end());
  }
  if (errors > 0) {
    state.SkipWithError(absl::StrCat(errors.load(), " heartbeats failed").c_str());
    return;
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto pct = [&](double p) {
    return latencies_ms[std::min(latencies_ms.size() - 1,
                                 static_cast<size_t>(p * latencies_ms.size()))];
  };
  state.counters["beats"] = static_cast<double>(latencies_ms.size());
  state.counters["p50_ms"] = pct(0.50);
  state.counters["p99_ms"] = pct(0.99);
  state.counters["max_ms"] = latencies_ms.back();
}

void Register() {
  constexpr int kJobs = 12000;
  for (auto [name, call] :
       {std::pair{"sync", FloorCall::kSyncUnary}, std::pair{"callback", FloorCall::kCallbackUnary},
        std::pair{"sync_stream", FloorCall::kSyncStream}}) {
    benchmark::RegisterBenchmark(absl::StrCat("BM_RpcFloor/", name).c_str(), BM_RpcFloor, call)
        ->Threads(8)
        ->Iterations(20000 / 8)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (bool postgres : {false, true}) {
    const char* backend = postgres ? "postgresql" : "sqlite";
    for (int nodes : {1, 8}) {
      for (bool claim_next : {false, true}) {
        // Every thread runs `iterations` dispatches; leave a margin of jobs.
        benchmark::RegisterBenchmark(
            absl::StrCat("BM_Dispatch/", backend, claim_next ? "/claim_next" : "/synchronize")
                .c_str(),
            BM_Dispatch, postgres, claim_next)
            ->Arg(kJobs)
            ->ArgName("jobs")
            ->Threads(nodes)
            ->Iterations(kJobs * 9 / 10 / nodes)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
    benchmark::RegisterBenchmark(absl::StrCat("BM_Heartbeats/", backend, "/nodes:1000").c_str(),
                                 BM_Heartbeats, postgres)
        ->Iterations(1)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace densegate::scheduler

int main(int argc, char** argv) {
  densegate::scheduler::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  densegate::scheduler::Fixtures().clear();
  benchmark::Shutdown();
  return 0;
}
