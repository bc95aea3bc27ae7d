// Dispatch throughput of the store alone (no RPC), from 1 or 8 concurrent
// claimers.
//
//   bazel run -c opt //results/store:store_bench               # SQLite
//   eval "$(tools/pg_cluster.sh start)"
//   bazel run -c opt //results/store:store_bench               # + PostgreSQL
//
// BM_ClaimAndFinish: each thread has its own store (its own connection),
// claims a batch of jobs, then finishes each with a verdict.
// BM_FinishAndClaimNext: the scheduler's hot path. One store shared by all
// threads, as in `densegate serve`; each thread is a registered node that
// finishes its lease with a verdict and gets its next lease in the same
// call. `claims` is StoreOptions::max_concurrent_claims (0: no limit), side
// by side. `replicas` > 1 models several schedulers on one PostgreSQL
// database: that many stores, each with its own claim limit, the threads
// dealt among them in turn. On PostgreSQL it also reports
// leases_per_statement: how many nodes a finish-and-claim statement served
// on average, all stores together (Store::finish_batch_counts).
//
// items_per_second is dispatches per second, all threads together. The
// queue is filled before timing starts.
//
// Wall-clock rates depend on what else the machine runs, so the CPU cost is
// reported too: client_us (this process) and server_us (the PostgreSQL
// backends serving it, read from /proc when the server is local) per
// dispatch, and cpu_bound_2core = 2 s / (client_us + server_us): the rate
// two otherwise idle cores would sustain if CPU is the limit.
#include <sys/resource.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "proto/densegate.pb.h"
#include "results/store/store.h"
#include "results/store/testing/test_database.h"

namespace densegate::results {
namespace {

// Jobs per benchmark run (all threads together).
constexpr int kJobsPerRun = 8000;

struct Fixture {
  std::unique_ptr<testing::TestDatabase> db;
  // One per thread (BM_ClaimAndFinish) or one per scheduler replica
  // (BM_FinishAndClaimNext).
  std::vector<std::unique_ptr<Store>> stores;
  // BM_FinishAndClaimNext: each thread's node and first lease.
  std::vector<std::string> node_ids;
  std::vector<v1::Lease> first_leases;
};

// Kept alive until exit: benchmark threads may still hold references when
// thread 0 returns.
std::vector<std::unique_ptr<Fixture>>& Fixtures() {
  static auto* fixtures = new std::vector<std::unique_ptr<Fixture>>();
  return *fixtures;
}
Fixture* g_current = nullptr;

// CPU seconds used by this process so far (all threads).
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

SubmitParams Job(int i) {
  SubmitParams p;
  v1::Candidate& c = p.candidate;
  c.set_id(absl::StrFormat("bench-%08d", i));
  c.set_repo("https://git.example/densegate.git");
  c.set_target_branch("main");
  c.set_baseline_sha("b0b0b0b0");
  c.set_candidate_sha(absl::StrFormat("c%08d", i));
  c.set_kind(i % 4 == 0 ? v1::EXPERIMENT : v1::CI);
  c.set_submitter("bench");
  c.set_manifest_hash("m");
  p.priority = i % 3;
  return p;
}

v1::Verdict Verdict() {
  v1::Verdict v;
  v.set_decision(v1::ACCEPT);
  v.set_policy(v1::NO_REGRESSION);
  v1::MetricComparison* m = v.add_metrics();
  m->set_metric("kda_decode.fused_b32");
  m->set_speedup(1.02);
  m->set_ci_low(1.01);
  m->set_ci_high(1.03);
  m->set_n_pairs(20);
  v.mutable_provenance()->set_software_version("bench");
  return v;
}

// Fresh database, `stores` stores opened with `options`, kJobsPerRun
// queued jobs.
Fixture* Setup(benchmark::State& state, bool postgres, int stores,
               const StoreOptions& options = {}) {
  auto f = std::make_unique<Fixture>();
  const std::string name =
      absl::StrCat("bench_", postgres ? "pg" : "sqlite", "_", stores);
  absl::StatusOr<std::unique_ptr<testing::TestDatabase>> db =
      postgres ? testing::TestDatabase::CreatePostgres(
                     testing::PostgresUrlFromEnv(), name)
               : testing::TestDatabase::CreateSqlite(name);
  if (!db.ok()) {
    state.SkipWithError(std::string(db.status().message()).c_str());
    return nullptr;
  }
  f->db = *std::move(db);
  for (int t = 0; t < stores; ++t) {
    absl::StatusOr<std::unique_ptr<Store>> s = OpenStore(f->db->url(), options);
    if (!s.ok()) {
      state.SkipWithError(std::string(s.status().message()).c_str());
      return nullptr;
    }
    f->stores.push_back(*std::move(s));
  }
  // Fill the queue in parallel (one writer for SQLite).
  const int fillers = postgres ? stores : 1;
  std::vector<std::thread> fill;
  bool ok = true;
  for (int t = 0; t < fillers; ++t) {
    fill.emplace_back([&, t] {
      for (int i = t; i < kJobsPerRun; i += fillers) {
        if (!f->stores[t]->Submit(Job(i)).ok()) ok = false;
      }
    });
  }
  for (std::thread& th : fill) th.join();
  if (!ok) {
    state.SkipWithError("filling the queue failed");
    return nullptr;
  }
  Fixtures().push_back(std::move(f));
  return Fixtures().back().get();
}

// Thread 0's CPU readings at the start of the timed loop.
struct CpuStart {
  double client = 0;
  double server = 0;
};

CpuStart ReadCpu() {
  CpuStart start;
  if (g_current != nullptr) {
    start.server = g_current->db->BackendCpuSeconds();
    start.client = ProcessCpuSeconds();
  }
  return start;
}

// Thread 0, after the loop (which ends for all threads together, so thread
// 0 sees all the work): CPU per dispatch.
void ReportCpu(benchmark::State& state, const CpuStart& start,
               double dispatches) {
  if (state.thread_index() != 0 || g_current == nullptr) return;
  const double client = ProcessCpuSeconds() - start.client;
  const double server = g_current->db->BackendCpuSeconds() - start.server;
  const double client_us = client / dispatches * 1e6;
  const double server_us = server / dispatches * 1e6;
  state.counters["client_us"] = client_us;
  state.counters["server_us"] = server_us;
  state.counters["cpu_bound_2core"] = 2e6 / (client_us + server_us);
}

bool SkipWithoutPostgres(benchmark::State& state, bool postgres) {
  if (!postgres || !testing::PostgresUrlFromEnv().empty()) return false;
  state.SkipWithError(
      "DENSEGATE_PG_URL not set: eval \"$(tools/pg_cluster.sh start)\"");
  return true;
}

void BM_ClaimAndFinish(benchmark::State& state, bool postgres) {
  const int batch = static_cast<int>(state.range(0));
  if (SkipWithoutPostgres(state, postgres)) return;
  CpuStart cpu;
  if (state.thread_index() == 0) {
    g_current = Setup(state, postgres, state.threads());
    cpu = ReadCpu();
  }
  // All threads start the loop together, after thread 0's setup.
  int64_t done = 0;
  const v1::Verdict verdict = Verdict();
  for (auto _ : state) {
    Fixture* f = g_current;
    if (f == nullptr) {
      state.SkipWithError("setup failed");
      break;
    }
    Store& store = *f->stores[state.thread_index()];
    ClaimRequest req;
    req.node_id = absl::StrCat("node-", state.thread_index());
    req.dimensions.set_accelerator_kind("cpu");
    req.max_jobs = batch;
    absl::StatusOr<std::vector<v1::Lease>> leases = store.ClaimJobs(req);
    if (!leases.ok()) {
      state.SkipWithError(std::string(leases.status().message()).c_str());
      break;
    }
    if (leases->empty()) {
      state.SkipWithError("queue ran dry: raise kJobsPerRun");
      break;
    }
    for (const v1::Lease& l : *leases) {
      absl::Status s = store.FinishLease({l.id(), req.node_id}, verdict);
      if (!s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        break;
      }
      ++done;
    }
  }
  state.SetItemsProcessed(done);
  ReportCpu(state, cpu,
            static_cast<double>(state.iterations()) * state.threads() * batch);
}

// Thread 0: registers one ACTIVE node per thread and leases each its first
// job, so that every iteration is one FinishLeaseAndClaimNext.
bool LeaseFirstJobs(benchmark::State& state, Fixture& f) {
  Store& store = *f.stores.front();
  for (int t = 0; t < state.threads(); ++t) {
    v1::NodeDimensions dims;
    dims.set_accelerator_kind("cpu");
    dims.set_accelerator_count(1);
    dims.set_fingerprint("bench");
    absl::StatusOr<v1::Node> node =
        store.RegisterNode(absl::StrCat("node-", t), dims);
    absl::Status active =
        node.ok() ? store.SetNodeState(node->id(), v1::ACTIVE) : node.status();
    if (!active.ok()) {
      state.SkipWithError(std::string(active.message()).c_str());
      return false;
    }
    ClaimRequest req;
    req.node_id = node->id();
    req.dimensions = dims;
    absl::StatusOr<std::vector<v1::Lease>> leases = store.ClaimJobs(req);
    if (!leases.ok() || leases->empty()) {
      state.SkipWithError("could not lease the first jobs");
      return false;
    }
    f.node_ids.push_back(node->id());
    f.first_leases.push_back(leases->front());
  }
  return true;
}

void BM_FinishAndClaimNext(benchmark::State& state, bool postgres) {
  if (SkipWithoutPostgres(state, postgres)) return;
  CpuStart cpu;
  if (state.thread_index() == 0) {
    StoreOptions options;
    options.max_concurrent_claims = static_cast<int>(state.range(0));
    g_current =
        Setup(state, postgres, static_cast<int>(state.range(1)), options);
    if (g_current != nullptr && !LeaseFirstJobs(state, *g_current)) {
      g_current = nullptr;
    }
    cpu = ReadCpu();
  }
  int64_t done = 0;
  const v1::Verdict verdict = Verdict();
  std::optional<v1::Lease> lease;
  std::string node_id;
  for (auto _ : state) {
    Fixture* f = g_current;
    if (f == nullptr) {
      state.SkipWithError("setup failed");
      break;
    }
    Store& store = *f->stores[state.thread_index() % f->stores.size()];
    if (!lease.has_value()) {
      lease = f->first_leases[state.thread_index()];
      node_id = f->node_ids[state.thread_index()];
    }
    v1::Verdict v = verdict;
    v.set_evaluation_id(lease->evaluation().id());
    absl::StatusOr<NextClaim> next = store.FinishLeaseAndClaimNext(
        {lease->id(), node_id}, v, absl::Minutes(5));
    if (!next.ok()) {
      state.SkipWithError(std::string(next.status().message()).c_str());
      break;
    }
    if (!next->lease.has_value()) {
      state.SkipWithError("queue ran dry: raise kJobsPerRun");
      break;
    }
    lease = std::move(next->lease);
    ++done;
  }
  state.SetItemsProcessed(done);
  ReportCpu(state, cpu,
            static_cast<double>(state.iterations()) * state.threads());
  if (state.thread_index() == 0 && g_current != nullptr) {
    // The stores were opened for this run and LeaseFirstJobs' claims are
    // not finishes: every count is from the loop.
    FinishBatchCounts sum;
    for (const auto& store : g_current->stores) {
      const FinishBatchCounts counts = store->finish_batch_counts();
      sum.statements += counts.statements;
      sum.leases += counts.leases;
    }
    if (sum.statements > 0) {
      state.counters["leases_per_statement"] =
          static_cast<double>(sum.leases) / static_cast<double>(sum.statements);
    }
  }
}

void Register() {
  struct Config {
    bool postgres;
    int threads;
    int batch;
  };
  const Config configs[] = {
      {false, 1, 1}, {false, 1, 16}, {false, 8, 1}, {false, 8, 16},
      {true, 1, 16}, {true, 8, 1},   {true, 8, 16},
  };
  for (const Config& c : configs) {
    // Every thread runs `iterations` iterations; leave a margin of jobs.
    const int iterations = (kJobsPerRun * 9 / 10) / (c.threads * c.batch);
    benchmark::RegisterBenchmark(c.postgres ? "BM_ClaimAndFinish/postgresql"
                                            : "BM_ClaimAndFinish/sqlite",
                                 BM_ClaimAndFinish, c.postgres)
        ->Arg(c.batch)
        ->ArgName("batch")
        ->Threads(c.threads)
        ->Iterations(iterations)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // The claim limit only applies to PostgreSQL; SQLite runs once.
  struct NextConfig {
    bool postgres;
    int threads;
    int claims;
    int replicas;
  };
  const NextConfig next_configs[] = {
      {false, 8, 1, 1}, {true, 1, 1, 1}, {true, 8, 0, 1}, {true, 8, 1, 1},
      {true, 8, 2, 1},  {true, 8, 2, 4}, {true, 8, 1, 4},
  };
  for (const NextConfig& c : next_configs) {
    // Each thread's first lease is claimed outside the loop.
    const int iterations = (kJobsPerRun * 9 / 10) / c.threads - 1;
    benchmark::RegisterBenchmark(c.postgres ? "BM_FinishAndClaimNext/postgresql"
                                            : "BM_FinishAndClaimNext/sqlite",
                                 BM_FinishAndClaimNext, c.postgres)
        ->Args({c.claims, c.replicas})
        ->ArgNames({"claims", "replicas"})
        ->Threads(c.threads)
        ->Iterations(iterations)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace densegate::results

int main(int argc, char** argv) {
  densegate::results::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  densegate::results::Fixtures().clear();
  return 0;
}
