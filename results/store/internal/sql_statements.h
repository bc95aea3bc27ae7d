// The queue's claim and finish statements, as each SQL dialect writes them
// (kPg*: PostgreSQL's one-round-trip forms; kSqliteClaim), the builders of
// their texts, and PostgreSQL's array parameters. Private to
// results/store; used by SqlStore (sql_store_impl.h).
//
// Thread-safety: constants and functions without shared mutable state (the
// texts built once are function-local statics).
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STATEMENTS_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STATEMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "proto/densegate.pb.h"
#include "results/store/internal/sql.h"

namespace densegate::results::internal::sql_store_impl {

// FinishLeaseAndClaimNext calls in one PostgreSQL statement, at most.
inline constexpr int kMaxFinishBatch = 16;

// Claim parameters: $1 accelerator kind, $2 count, $3 memory,
// $4 fingerprint, $5 node id; then PostgreSQL: $6 now, $7 expiry (the
// limit is in the text); SQLite: $6 limit. A job with a noise limit goes
// only to a node whose last calibration is within it.
inline constexpr char kPgClaim[] =
    "WITH picked AS ("
    " SELECT id FROM jobs WHERE state = 1"
    " AND (req_accelerator_kind = '' OR req_accelerator_kind = $1)"
    " AND req_min_accelerator_count <= $2"
    " AND req_min_accelerator_memory <= $3"
    " AND (req_fingerprint = '' OR req_fingerprint = $4)"
    " AND (req_node_id = '' OR req_node_id = $5)"
    " AND (req_max_node_noise = 0 OR req_max_node_noise >="
    " (SELECT calibration_noise FROM nodes WHERE id = $5))"
    " ORDER BY priority_class, priority DESC, id LIMIT @LIMIT@"
    " FOR UPDATE SKIP LOCKED),"
    " claimed AS ("
    " UPDATE jobs SET state = 2, attempts = jobs.attempts + 1,"
    " current_lease_id = 'lease-' || jobs.id || '-' || (jobs.attempts + 1),"
    " updated_at_us = $6 FROM picked WHERE jobs.id = picked.id"
    " RETURNING jobs.id, jobs.kind, jobs.evaluation_id, jobs.attempts,"
    " jobs.current_lease_id, jobs.priority_class, jobs.priority),"
    " leased AS ("
    " INSERT INTO leases (id, job_id, job_kind, evaluation_id, node_id,"
    " attempt, state, granted_at_us, expires_at_us)"
    " SELECT current_lease_id, id, kind, evaluation_id, CAST($5 AS TEXT),"
    " attempts, 1, CAST($6 AS BIGINT), CAST($7 AS BIGINT) FROM claimed),"
    " running AS ("
    " UPDATE evaluations SET state = 2, node_id = $5,"
    " attempt = claimed.attempts, updated_at_us = $6"
    " FROM claimed WHERE evaluations.id = claimed.evaluation_id)"
    " SELECT cl.id, cl.kind, cl.evaluation_id, cl.attempts,"
    " cl.current_lease_id, cl.priority_class, cl.priority, e.created_at_us,"
    " c.proto FROM claimed cl LEFT JOIN evaluations e ON e.id ="
    " cl.evaluation_id LEFT JOIN candidates c ON c.id = e.candidate_id";
inline constexpr char kSqliteClaim[] =
    "SELECT id, kind, evaluation_id, attempts, priority_class, priority"
    " FROM jobs WHERE state = 1"
    " AND (req_accelerator_kind = '' OR req_accelerator_kind = $1)"
    " AND req_min_accelerator_count <= $2"
    " AND req_min_accelerator_memory <= $3"
    " AND (req_fingerprint = '' OR req_fingerprint = $4)"
    " AND (req_node_id = '' OR req_node_id = $5)"
    " AND (req_max_node_noise = 0 OR req_max_node_noise >="
    " (SELECT calibration_noise FROM nodes WHERE id = $5))"
    " ORDER BY priority_class, priority DESC, id LIMIT $6";

// What both finish statements (PgFinish, kPgFinishAndClaimBatch) write
// besides the lease: `j` and `e` end the job and the evaluation of each
// lease in `l` at time `now` (a parameter); kVerdictInsert and
// kComparisonInsert head the verdict's and its comparisons' inserts,
// which add their values (the comparisons, decided_at_us and m.proto).
std::string EndJobAndEvaluation(absl::string_view now);
inline constexpr char kVerdictInsert[] =
    "INSERT INTO verdicts (evaluation_id, candidate_id, lease_id,"
    " decision, policy, manifest_hash, node_id, node_fingerprint,"
    " software_version, statistics_seed, decided_at_us, proto)";
inline constexpr char kComparisonInsert[] =
    "INSERT INTO metric_comparisons (evaluation_id, metric, unit,"
    " direction, is_primary, baseline, candidate, speedup, ci_low, ci_high,"
    " n_pairs, p_value, significant, flagged_for_review, decided_at_us,"
    " proto)"
    " SELECT l.evaluation_id, m.metric, m.unit, m.direction, m.is_primary,"
    " m.baseline, m.candidate, m.speedup, m.ci_low, m.ci_high, m.n_pairs,"
    " m.p_value, m.significant, m.flagged";
inline constexpr char kPgFinishCount[] = " SELECT count(*) FROM l";

// PostgreSQL's FinishLease in one round trip: ends the lease, the job and
// the evaluation and writes the verdict, its samples and comparisons, all
// only if the lease is live, held by the node ($2), an evaluation lease,
// and the verdict names its own evaluation, candidate and samples; counts
// the leases it ended (0: nothing written). Lock order as everywhere: the
// lease, then the job, then the evaluation. Foreign keys to the new
// verdict are checked at the end of the statement.
const std::string& PgFinish();
// PgFinish(), then kPgClaim's claim of one job for the lease's node, only
// when the lease was ended and the node is ACTIVE (2), with its registered
// dimensions; $30: the new lease's expiry. One row per claimed job, or one
// with NULLs: the count of ended leases, the node's state, kPgClaim's
// columns. The finish and the claim touch different jobs and evaluations
// (the claim's job was queued when the statement began). The finish's
// updates run first (the claim's scan is gated on them): a FOR UPDATE
// SKIP LOCKED scan keeps its lock on a row it re-checked and passed over
// (a job another statement claimed meanwhile), and that job's finish waits
// for the lock; were a statement's finish to wait after its own scan, two
// statements could each wait for the other.
inline constexpr char kPgClaimAfterFinish[] =
    ", n AS (SELECT state, accelerator_kind, accelerator_count,"
    " accelerator_memory_bytes, fingerprint, calibration_noise FROM nodes"
    " WHERE id = $2),"
    " picked AS ("
    " SELECT id FROM jobs WHERE state = 1"
    " AND (SELECT count(*) FROM j) = 1 AND (SELECT count(*) FROM e) = 1"
    " AND (SELECT state FROM n) = 2"
    " AND (req_accelerator_kind = ''"
    " OR req_accelerator_kind = (SELECT accelerator_kind FROM n))"
    " AND req_min_accelerator_count <= (SELECT accelerator_count FROM n)"
    " AND req_min_accelerator_memory <="
    " (SELECT accelerator_memory_bytes FROM n)"
    " AND (req_fingerprint = '' OR req_fingerprint = (SELECT fingerprint"
    " FROM n))"
    " AND (req_node_id = '' OR req_node_id = $2)"
    " AND (req_max_node_noise = 0"
    " OR req_max_node_noise >= (SELECT calibration_noise FROM n))"
    " ORDER BY priority_class, priority DESC, id LIMIT 1"
    " FOR UPDATE SKIP LOCKED),"
    " claimed AS ("
    " UPDATE jobs SET state = 2, attempts = jobs.attempts + 1,"
    " current_lease_id = 'lease-' || jobs.id || '-' || (jobs.attempts + 1),"
    " updated_at_us = $3 FROM picked WHERE jobs.id = picked.id"
    " RETURNING jobs.id, jobs.kind, jobs.evaluation_id, jobs.attempts,"
    " jobs.current_lease_id, jobs.priority_class, jobs.priority),"
    " leased AS ("
    " INSERT INTO leases (id, job_id, job_kind, evaluation_id, node_id,"
    " attempt, state, granted_at_us, expires_at_us)"
    " SELECT current_lease_id, id, kind, evaluation_id, CAST($2 AS TEXT),"
    " attempts, 1, CAST($3 AS BIGINT), CAST($30 AS BIGINT) FROM claimed),"
    " running AS ("
    " UPDATE evaluations SET state = 2, node_id = $2,"
    " attempt = claimed.attempts, updated_at_us = $3"
    " FROM claimed WHERE evaluations.id = claimed.evaluation_id)"
    " SELECT (SELECT count(*) FROM l), (SELECT state FROM n),"
    " cl.id, cl.kind, cl.evaluation_id, cl.attempts,"
    " cl.current_lease_id, cl.priority_class, cl.priority, e.created_at_us,"
    " c.proto FROM (SELECT 1) AS one LEFT JOIN claimed cl ON true"
    " LEFT JOIN evaluations e ON e.id = cl.evaluation_id"
    " LEFT JOIN candidates c ON c.id = e.candidate_id";
static_assert(v1::ACTIVE == 2, "kPgClaimAfterFinish names ACTIVE as 2");
const std::string& PgFinishAndClaim();

// FinishLeaseAndClaimNext for a batch of leases in one round trip
// (BatchTurn): PgFinish() for each, then, for each lease ended whose node
// is ACTIVE (2), the claim of one job matching the node's registered
// dimensions. $1: now. One element per lease in $2-$15: lease, node,
// evaluation and candidate the verdict names, the verdict's columns (as
// PgFinish()'s $7-$15), the new lease's expiry. The verdicts' samples and
// metric comparisons are flattened, each element naming its lease by
// position (1-based): $16-$17 and $18-$32. The claim's LIMIT (@LIMIT@, the
// batch size) is in the text, as in kPgClaim; @FINISH@ stands for the
// writes it shares with PgFinish() (EndJobAndEvaluation and the verdict's
// inserts).
//
// One scan claims for the whole batch, job i to the i-th node in arrival
// order, which is only right when the nodes match the same jobs: all of
// the same dimensions and no queued job pinned to one of them. Otherwise
// nothing is claimed and `batched` says so (the caller claims for each).
// As in a single finish and claim, the finish's updates run before the
// scan (the scan is gated on them): a FOR UPDATE SKIP LOCKED scan keeps its
// lock on a row it re-checked and passed over (a job another statement
// claimed meanwhile), and that job's finish waits for the lock; were a
// statement's finish to wait after its own scan, two statements could
// each wait for the other.
//
// One row per lease, in batch order: its position, whether it was ended,
// the node's state, `batched`, then kPgClaim's columns (NULL when no job
// was claimed for it).
inline constexpr char kPgFinishAndClaimBatch[] =
    "WITH i AS (SELECT * FROM unnest(CAST($2 AS TEXT[]), CAST($3 AS TEXT[]),"
    " CAST($4 AS TEXT[]), CAST($5 AS TEXT[]), CAST($6 AS INTEGER[]),"
    " CAST($7 AS INTEGER[]), CAST($8 AS TEXT[]), CAST($9 AS TEXT[]),"
    " CAST($10 AS TEXT[]), CAST($11 AS TEXT[]), CAST($12 AS BIGINT[]),"
    " CAST($13 AS BIGINT[]), CAST($14 AS BYTEA[]), CAST($15 AS BIGINT[]))"
    " WITH ORDINALITY AS i(lease_id, node_id, evaluation_id, candidate_id,"
    " decision, policy, manifest_hash, provenance_node_id, node_fingerprint,"
    " software_version, statistics_seed, decided_at_us, proto,"
    " expires_at_us, item)),"
    " s AS (SELECT * FROM unnest(CAST($16 AS INTEGER[]),"
    " CAST($17 AS BIGINT[])) AS s(item, id)),"
    " found AS (SELECT i.item, hit.tid FROM i, LATERAL (SELECT ctid AS tid"
    " FROM leases WHERE leases.id = i.lease_id LIMIT 1) AS hit),"
    " l AS ("
    " UPDATE leases SET state = 2, ended_at_us = $1, end_reason = 'finished'"
    " FROM found JOIN i ON i.item = found.item"
    " WHERE leases.ctid = found.tid AND (SELECT"
    " leases.node_id = i.node_id AND leases.state = 1"
    " AND leases.expires_at_us > $1 AND leases.job_kind = 1"
    " AND (i.evaluation_id = '' OR leases.evaluation_id = i.evaluation_id)"
    " AND (i.candidate_id = '' OR i.candidate_id = (SELECT candidate_id"
    " FROM evaluations WHERE evaluations.id = leases.evaluation_id))"
    " AND NOT EXISTS (SELECT 1 FROM s WHERE s.item = i.item AND NOT EXISTS"
    " (SELECT 1 FROM samples WHERE samples.id = s.id"
    " AND samples.evaluation_id = leases.evaluation_id)))"
    " RETURNING leases.id, leases.job_id, leases.evaluation_id,"
    " leases.node_id, i.item),"
    "@FINISH@"
    " n AS (SELECT l.item, nodes.id, nodes.state, nodes.accelerator_kind,"
    " nodes.accelerator_count, nodes.accelerator_memory_bytes,"
    " nodes.fingerprint, nodes.calibration_noise FROM l JOIN nodes"
    " ON nodes.id = l.node_id),"
    " ready AS (SELECT * FROM n WHERE state = 2"
    " AND (SELECT count(*) FROM j) = (SELECT count(*) FROM l)"
    " AND (SELECT count(*) FROM e) = (SELECT count(*) FROM l)),"
    " batched AS (SELECT count(DISTINCT (accelerator_kind,"
    " accelerator_count, accelerator_memory_bytes, fingerprint,"
    " calibration_noise)) <= 1"
    " AND NOT EXISTS (SELECT 1 FROM jobs WHERE state = 1"
    " AND req_node_id <> '' AND req_node_id IN (SELECT id FROM ready))"
    " AS yes FROM ready),"
    " d AS (SELECT * FROM ready LIMIT 1),"
    " picked AS (SELECT id, priority_class, priority FROM jobs"
    " WHERE state = 1 AND (SELECT yes FROM batched)"
    " AND (req_accelerator_kind = ''"
    " OR req_accelerator_kind = (SELECT accelerator_kind FROM d))"
    " AND req_min_accelerator_count <= (SELECT accelerator_count FROM d)"
    " AND req_min_accelerator_memory <="
    " (SELECT accelerator_memory_bytes FROM d)"
    " AND (req_fingerprint = '' OR req_fingerprint = (SELECT fingerprint"
    " FROM d))"
    " AND req_node_id = ''"
    " AND (req_max_node_noise = 0"
    " OR req_max_node_noise >= (SELECT calibration_noise FROM d))"
    " ORDER BY priority_class, priority DESC, id LIMIT @LIMIT@"
    " FOR UPDATE SKIP LOCKED),"
    " ranked AS (SELECT id, row_number() OVER (ORDER BY priority_class,"
    " priority DESC, id) AS rank FROM picked),"
    " takers AS (SELECT item, id AS node_id, row_number() OVER"
    " (ORDER BY item) AS rank FROM ready),"
    " claimed AS ("
    " UPDATE jobs SET state = 2, attempts = jobs.attempts + 1,"
    " current_lease_id = 'lease-' || jobs.id || '-' || (jobs.attempts + 1),"
    " updated_at_us = $1 FROM ranked JOIN takers USING (rank)"
    " WHERE jobs.id = ranked.id"
    " RETURNING jobs.id, jobs.kind, jobs.evaluation_id, jobs.attempts,"
    " jobs.current_lease_id, jobs.priority_class, jobs.priority,"
    " takers.node_id, takers.item),"
    " leased AS ("
    " INSERT INTO leases (id, job_id, job_kind, evaluation_id, node_id,"
    " attempt, state, granted_at_us, expires_at_us)"
    " SELECT cl.current_lease_id, cl.id, cl.kind, cl.evaluation_id,"
    " cl.node_id, cl.attempts, 1, CAST($1 AS BIGINT), i.expires_at_us"
    " FROM claimed cl JOIN i ON i.item = cl.item),"
    " running AS ("
    " UPDATE evaluations SET state = 2, node_id = claimed.node_id,"
    " attempt = claimed.attempts, updated_at_us = $1"
    " FROM claimed WHERE evaluations.id = claimed.evaluation_id)"
    " SELECT i.item, CAST(l.id IS NOT NULL AS INTEGER), n.state,"
    " CAST((SELECT yes FROM batched) AS INTEGER),"
    " cl.id, cl.kind, cl.evaluation_id, cl.attempts,"
    " cl.current_lease_id, cl.priority_class, cl.priority, ev.created_at_us,"
    " c.proto FROM i LEFT JOIN l ON l.item = i.item"
    " LEFT JOIN n ON n.item = i.item LEFT JOIN claimed cl ON cl.item = i.item"
    " LEFT JOIN evaluations ev ON ev.id = cl.evaluation_id"
    " LEFT JOIN candidates c ON c.id = ev.candidate_id ORDER BY i.item";
static_assert(v1::ACTIVE == 2, "kPgFinishAndClaimBatch names ACTIVE as 2");
// kPgFinishAndClaimBatch's text for a batch of `n` (2 to kMaxFinishBatch),
// made once per size rather than on every statement.
const std::string& PgFinishAndClaimBatch(size_t n);

// PostgreSQL array literals, passed as one text parameter.
SqlValue PgArray(const std::vector<int64_t>& v);
SqlValue PgArray(const std::vector<double>& v);
SqlValue PgArray(const std::vector<std::string>& v);


// kPgClaim for at most `limit` jobs. The limit is part of the text, not a
// parameter: PostgreSQL then knows the claim touches few rows and plans
// index lookups for the joins (its generic plan for LIMIT $n assumed many
// rows).
std::string PgClaim(int limit);
std::vector<SqlValue> PgClaimArgs(const std::string& node_id,
                                         const v1::NodeDimensions& d,
                                         int64_t now, int64_t expires);


// Verdicts' metric comparisons as the 14 parallel arrays PgFinish() and
// kPgFinishAndClaimBatch unnest, plus (for the batch) each comparison's
// lease position.
struct PgComparisonArrays {
  // The arrays AppendTo adds, in order: their names in the statements'
  // unnest and their element types.
  static constexpr char kNames[] =
      "metric, unit, direction, is_primary, baseline, candidate, speedup,"
      " ci_low, ci_high, n_pairs, p_value, significant, flagged, proto";
  static constexpr const char* kTypes[] = {"TEXT",
                                           "TEXT",
                                           "INTEGER",
                                           "INTEGER",
                                           "DOUBLE PRECISION",
                                           "DOUBLE PRECISION",
                                           "DOUBLE PRECISION",
                                           "DOUBLE PRECISION",
                                           "DOUBLE PRECISION",
                                           "INTEGER",
                                           "DOUBLE PRECISION",
                                           "INTEGER",
                                           "INTEGER",
                                           "BYTEA"};
  // "CAST($first AS TEXT[]), ..." for the 14 arrays.
  static std::string Casts(int first) {
    std::vector<std::string> casts;
    for (const char* type : kTypes) {
      casts.push_back(absl::StrCat("CAST($", first++, " AS ", type, "[])"));
    }
    return absl::StrJoin(casts, ", ");
  }

  std::vector<int64_t> item;
  std::vector<std::string> metric, unit, proto;
  std::vector<int64_t> direction, primary, n_pairs, significant, flagged;
  std::vector<double> baseline, candidate, speedup, ci_low, ci_high, p_value;

  void Add(const v1::Verdict& v, int64_t position) {
    for (const v1::MetricComparison& m : v.metrics()) {
      item.push_back(position);
      metric.push_back(m.metric());
      unit.push_back(m.unit());
      direction.push_back(m.direction());
      primary.push_back(m.primary() ? 1 : 0);
      baseline.push_back(m.baseline());
      candidate.push_back(m.candidate());
      speedup.push_back(m.speedup());
      ci_low.push_back(m.ci_low());
      ci_high.push_back(m.ci_high());
      n_pairs.push_back(m.n_pairs());
      p_value.push_back(m.p_value());
      significant.push_back(m.significant() ? 1 : 0);
      flagged.push_back(m.flagged_for_review() ? 1 : 0);
      // bytea in hex input form; PgArray escapes the backslash.
      proto.push_back(absl::StrCat("\\x", HexEncode(m.SerializeAsString())));
    }
  }
  void AppendTo(std::vector<SqlValue>& args) const {
    for (SqlValue a :
         {PgArray(metric), PgArray(unit), PgArray(direction),
          PgArray(primary), PgArray(baseline), PgArray(candidate),
          PgArray(speedup), PgArray(ci_low), PgArray(ci_high),
          PgArray(n_pairs), PgArray(p_value), PgArray(significant),
          PgArray(flagged), PgArray(proto)}) {
      args.push_back(std::move(a));
    }
  }
};

}  // namespace densegate::results::internal::sql_store_impl

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STATEMENTS_H_
