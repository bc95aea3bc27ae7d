#include "results/store/internal/schema.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace densegate::results::internal {
namespace {

// Version 1 in a dialect-neutral spelling: @ID@ (auto-increment primary
// key), @BIGINT@, @DOUBLE@, @BYTES@, @STRICT@ and @HOT@ are replaced per
// dialect.
// Times are microseconds since the Unix epoch (*_us); booleans are 0/1
// integers; enums hold the proto enum numbers. The queue's hot tables
// (evaluations, jobs, leases) keep few indexes, and on PostgreSQL leave room
// in each page (@HOT@: fillfactor), because every claim, heartbeat and
// finish updates them. evaluations has no index on state, so its updates
// are HOT (no index writes). Job states: 1 queued,
// 2 leased, 3 done, 4 cancelled, 5 dead. Lease states: 1 active,
// 2 finished, 3 expired, 4 cancelled, 5 failed.
constexpr char kV1Tables[] = R"sql(
CREATE TABLE repos (
  id @ID@,
  url TEXT NOT NULL UNIQUE,
  created_at_us @BIGINT@ NOT NULL
)@STRICT@;

CREATE TABLE candidates (
  id TEXT PRIMARY KEY,
  repo_id @BIGINT@ NOT NULL REFERENCES repos(id),
  target_branch TEXT NOT NULL,
  baseline_sha TEXT NOT NULL,
  candidate_sha TEXT NOT NULL,
  manifest_hash TEXT NOT NULL,
  kind INTEGER NOT NULL,
  policy INTEGER NOT NULL,
  submitter TEXT NOT NULL,
  campaign TEXT NOT NULL,
  submitted_at_us @BIGINT@ NOT NULL,
  proto @BYTES@ NOT NULL
)@STRICT@;
CREATE INDEX candidates_campaign ON candidates (campaign) WHERE campaign <> '';

CREATE TABLE evaluations (
  seq @ID@,
  id TEXT NOT NULL UNIQUE,
  candidate_id TEXT NOT NULL REFERENCES candidates(id),
  repo_id @BIGINT@ NOT NULL REFERENCES repos(id),
  kind INTEGER NOT NULL,
  submitter TEXT NOT NULL,
  state INTEGER NOT NULL,
  node_id TEXT NOT NULL DEFAULT '',
  attempt INTEGER NOT NULL DEFAULT 0,
  cancel_reason TEXT NOT NULL DEFAULT '',
  created_at_us @BIGINT@ NOT NULL,
  updated_at_us @BIGINT@ NOT NULL
)@STRICT@@HOT@;
CREATE INDEX evaluations_candidate ON evaluations (candidate_id, seq);
CREATE INDEX evaluations_repo ON evaluations (repo_id, seq);
CREATE INDEX evaluations_created ON evaluations (created_at_us);
CREATE INDEX evaluations_submitter ON evaluations (submitter, seq);

CREATE TABLE jobs (
  id @ID@,
  kind INTEGER NOT NULL,
  evaluation_id TEXT UNIQUE REFERENCES evaluations(id),
  priority_class INTEGER NOT NULL,
  priority INTEGER NOT NULL,
  state INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NOT NULL,
  req_accelerator_kind TEXT NOT NULL,
  req_min_accelerator_count INTEGER NOT NULL,
  req_min_accelerator_memory @BIGINT@ NOT NULL,
  req_fingerprint TEXT NOT NULL,
  req_node_id TEXT NOT NULL,
  current_lease_id TEXT NOT NULL DEFAULT '',
  last_error TEXT NOT NULL DEFAULT '',
  enqueued_at_us @BIGINT@ NOT NULL,
  updated_at_us @BIGINT@ NOT NULL
)@STRICT@@HOT@;
CREATE INDEX jobs_queue ON jobs (priority_class, priority DESC, id) WHERE state = 1;
CREATE INDEX jobs_pinned ON jobs (req_node_id) WHERE req_node_id <> '';

CREATE TABLE leases (
  id TEXT PRIMARY KEY,
  job_id @BIGINT@ NOT NULL REFERENCES jobs(id),
  job_kind INTEGER NOT NULL,
  evaluation_id TEXT REFERENCES evaluations(id),
  node_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  state INTEGER NOT NULL,
  granted_at_us @BIGINT@ NOT NULL,
  expires_at_us @BIGINT@ NOT NULL,
  ended_at_us @BIGINT@ NOT NULL DEFAULT 0,
  end_reason TEXT NOT NULL DEFAULT ''
)@STRICT@@HOT@;
CREATE INDEX leases_live ON leases (expires_at_us) WHERE state = 1;
CREATE INDEX leases_node_live ON leases (node_id) WHERE state = 1;

CREATE TABLE stages (
  id @ID@,
  evaluation_id TEXT NOT NULL REFERENCES evaluations(id),
  lease_id TEXT NOT NULL REFERENCES leases(id),
  attempt INTEGER NOT NULL,
  kind INTEGER NOT NULL,
  status INTEGER NOT NULL,
  started_at_us @BIGINT@ NOT NULL,
  seconds @DOUBLE@ NOT NULL,
  log_uri TEXT NOT NULL,
  summary TEXT NOT NULL,
  recorded_at_us @BIGINT@ NOT NULL,
  proto @BYTES@ NOT NULL
)@STRICT@;
CREATE INDEX stages_evaluation ON stages (evaluation_id, id);

CREATE TABLE samples (
  id @ID@,
  evaluation_id TEXT NOT NULL REFERENCES evaluations(id),
  lease_id TEXT NOT NULL REFERENCES leases(id),
  metric TEXT NOT NULL,
  arm INTEGER NOT NULL,
  pair_index INTEGER NOT NULL,
  value @DOUBLE@ NOT NULL,
  unit TEXT NOT NULL,
  process_wall_seconds @DOUBLE@ NOT NULL,
  process_cpu_seconds @DOUBLE@ NOT NULL,
  recorded_at_us @BIGINT@ NOT NULL,
  UNIQUE (lease_id, metric, arm, pair_index)
)@STRICT@;
CREATE INDEX samples_evaluation ON samples (evaluation_id, id);

CREATE TABLE verdicts (
  evaluation_id TEXT PRIMARY KEY REFERENCES evaluations(id),
  candidate_id TEXT NOT NULL REFERENCES candidates(id),
  lease_id TEXT NOT NULL REFERENCES leases(id),
  decision INTEGER NOT NULL,
  policy INTEGER NOT NULL,
  manifest_hash TEXT NOT NULL,
  node_id TEXT NOT NULL,
  node_fingerprint TEXT NOT NULL,
  software_version TEXT NOT NULL,
  statistics_seed @BIGINT@ NOT NULL,
  decided_at_us @BIGINT@ NOT NULL,
  proto @BYTES@ NOT NULL
)@STRICT@;
CREATE INDEX verdicts_decided ON verdicts (decided_at_us);

CREATE TABLE verdict_samples (
  evaluation_id TEXT NOT NULL REFERENCES verdicts(evaluation_id),
  sample_id @BIGINT@ NOT NULL REFERENCES samples(id),
  PRIMARY KEY (evaluation_id, sample_id)
)@STRICT@;

CREATE TABLE metric_comparisons (
  evaluation_id TEXT NOT NULL REFERENCES verdicts(evaluation_id),
  metric TEXT NOT NULL,
  unit TEXT NOT NULL,
  direction INTEGER NOT NULL,
  is_primary INTEGER NOT NULL,
  baseline @DOUBLE@ NOT NULL,
  candidate @DOUBLE@ NOT NULL,
  speedup @DOUBLE@ NOT NULL,
  ci_low @DOUBLE@ NOT NULL,
  ci_high @DOUBLE@ NOT NULL,
  n_pairs INTEGER NOT NULL,
  p_value @DOUBLE@ NOT NULL,
  significant INTEGER NOT NULL,
  flagged_for_review INTEGER NOT NULL,
  decided_at_us @BIGINT@ NOT NULL,
  proto @BYTES@ NOT NULL,
  PRIMARY KEY (evaluation_id, metric)
)@STRICT@;
CREATE INDEX metric_comparisons_metric ON metric_comparisons (metric, decided_at_us);

CREATE TABLE nodes (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  accelerator_kind TEXT NOT NULL,
  accelerator_count INTEGER NOT NULL,
  accelerator_memory_bytes @BIGINT@ NOT NULL,
  fingerprint TEXT NOT NULL,
  dimensions @BYTES@ NOT NULL,
  state INTEGER NOT NULL,
  calibration_noise @DOUBLE@ NOT NULL DEFAULT 0,
  last_heartbeat_us @BIGINT@ NOT NULL DEFAULT 0,
  registered_at_us @BIGINT@ NOT NULL,
  updated_at_us @BIGINT@ NOT NULL
)@STRICT@;

CREATE TABLE merge_queue (
  position @ID@,
  evaluation_id TEXT NOT NULL UNIQUE REFERENCES evaluations(id),
  repo_id @BIGINT@ NOT NULL REFERENCES repos(id),
  target_branch TEXT NOT NULL,
  state INTEGER NOT NULL,
  merged_sha TEXT NOT NULL DEFAULT '',
  remeasure_evaluation_id TEXT NOT NULL DEFAULT '',
  message TEXT NOT NULL DEFAULT '',
  created_at_us @BIGINT@ NOT NULL,
  updated_at_us @BIGINT@ NOT NULL
)@STRICT@;
CREATE INDEX merge_queue_branch ON merge_queue (repo_id, target_branch, position);

CREATE TABLE audit_log (
  id @ID@,
  at_us @BIGINT@ NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  subject TEXT NOT NULL,
  detail TEXT NOT NULL
)@STRICT@;
CREATE INDEX audit_log_subject ON audit_log (subject, id);
CREATE INDEX audit_log_actor ON audit_log (actor, id);
CREATE INDEX audit_log_at ON audit_log (at_us);
)sql";

// Append-only tables: raw samples, verdicts and what they were computed
// from, and the audit log. The database itself rejects changes.
constexpr const char* kImmutableTables[] = {"samples", "verdicts",
                                            "verdict_samples",
                                            "metric_comparisons", "audit_log"};

std::string V1(Dialect dialect) {
  std::string tables;
  std::string triggers;
  if (dialect == Dialect::kPostgres) {
    tables =
        absl::StrReplaceAll(kV1Tables, {{"@ID@", "BIGSERIAL PRIMARY KEY"},
                                        {"@BIGINT@", "BIGINT"},
                                        {"@DOUBLE@", "DOUBLE PRECISION"},
                                        {"@BYTES@", "BYTEA"},
                                        {"@STRICT@", ""},
                                        {"@HOT@", " WITH (fillfactor = 80)"}});
    triggers = R"sql(
CREATE FUNCTION densegate_reject_change() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  RAISE EXCEPTION 'densegate: % rows are immutable (append-only); % rejected',
    TG_TABLE_NAME, TG_OP USING ERRCODE = 'P0001';
END
$fn$;
)sql";
    for (const char* t : kImmutableTables) {
      absl::StrAppend(
          &triggers, "CREATE TRIGGER ", t,
          "_immutable BEFORE UPDATE OR DELETE ON ", t,
          " FOR EACH ROW EXECUTE FUNCTION densegate_reject_change();\n",
          "CREATE TRIGGER ", t, "_no_truncate BEFORE TRUNCATE ON ", t,
          " FOR EACH STATEMENT EXECUTE FUNCTION densegate_reject_change();\n");
    }
  } else {
    tables = absl::StrReplaceAll(kV1Tables,
                                 {{"@ID@", "INTEGER PRIMARY KEY AUTOINCREMENT"},
                                  {"@BIGINT@", "INTEGER"},
                                  {"@DOUBLE@", "REAL"},
                                  {"@BYTES@", "BLOB"},
                                  {"@STRICT@", " STRICT"},
                                  {"@HOT@", ""}});
    for (const char* t : kImmutableTables) {
      for (const char* op : {"UPDATE", "DELETE"}) {
        absl::StrAppend(&triggers, "CREATE TRIGGER ", t, "_no_",
                        absl::AsciiStrToLower(op), " BEFORE ", op, " ON ", t,
                        " BEGIN SELECT RAISE(ABORT, 'densegate: ", t,
                        " rows are immutable (append-only); ", op,
                        " rejected'); END;\n");
      }
    }
  }
  return absl::StrCat(tables, triggers);
}

// A job's noise limit: only nodes whose A/A calibration noise is at most
// req_max_node_noise (0: any) claim it; the repository's manifest sets it.
std::string V2(Dialect dialect) {
  return absl::StrCat("ALTER TABLE jobs ADD COLUMN req_max_node_noise ",
                      dialect == Dialect::kPostgres ? "DOUBLE PRECISION" : "REAL",
                      " NOT NULL DEFAULT 0;\n");
}

// Feedback bundles, one per evaluation (the latest upload): feedback.json
// as text, the files as a zlib-deflated FeedbackBundle (content_encoding),
// emptied by the retention rule (files_dropped_at_us > 0) while the row,
// the summary and the list of omitted files stay. repo_id and
// target_branch are the candidate's, copied for the rule's index.
std::string V3(Dialect dialect) {
  const bool pg = dialect == Dialect::kPostgres;
  return absl::StrReplaceAll(R"sql(
CREATE TABLE feedback_bundles (
  evaluation_id TEXT PRIMARY KEY REFERENCES evaluations(id),
  lease_id TEXT NOT NULL REFERENCES leases(id),
  repo_id @BIGINT@ NOT NULL REFERENCES repos(id),
  target_branch TEXT NOT NULL,
  summary TEXT NOT NULL,
  content_encoding TEXT NOT NULL,
  content @BYTES@ NOT NULL,
  files INTEGER NOT NULL,
  bytes @BIGINT@ NOT NULL,
  omitted TEXT NOT NULL,
  recorded_at_us @BIGINT@ NOT NULL,
  files_dropped_at_us @BIGINT@ NOT NULL DEFAULT 0
)@STRICT@;
CREATE INDEX feedback_bundles_branch ON feedback_bundles (repo_id, target_branch, recorded_at_us);
)sql",
                             {{"@BIGINT@", pg ? "BIGINT" : "INTEGER"},
                              {"@BYTES@", pg ? "BYTEA" : "BLOB"},
                              {"@STRICT@", pg ? "" : " STRICT"}});
}

// Campaigns: an agent's experiments toward one goal. The spec is kept as
// the Campaign proto; its history is the evaluations that name it
// (candidates.campaign, indexed since V1).
std::string V4(Dialect dialect) {
  const bool pg = dialect == Dialect::kPostgres;
  return absl::StrReplaceAll(R"sql(
CREATE TABLE campaigns (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  created_at_us @BIGINT@ NOT NULL,
  proto @BYTES@ NOT NULL
)@STRICT@;
)sql",
                             {{"@BIGINT@", pg ? "BIGINT" : "INTEGER"},
                              {"@BYTES@", pg ? "BYTEA" : "BLOB"},
                              {"@STRICT@", pg ? "" : " STRICT"}});
}

// Approval: who approved a merge-queue entry that its branch's policy
// held for a person (MergeStatus.approved_by).
std::string V5(Dialect) {
  return "ALTER TABLE merge_queue ADD COLUMN approved_by TEXT NOT NULL DEFAULT '';\n";
}

constexpr Migration kMigrations[] = {
    {1, "initial schema", &V1},
    {2, "job noise limits", &V2},
    {3, "feedback bundles", &V3},
    {4, "campaigns", &V4},
    {5, "merge approvals", &V5},
};

constexpr char kMigrationsTable[] =
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL,"
    " applied_at_us BIGINT NOT NULL)";

absl::StatusOr<bool> MigrationsTableExists(SqlTx& tx, Dialect dialect) {
  absl::StatusOr<SqlResult> r =
      dialect == Dialect::kPostgres
          ? tx.Exec("SELECT to_regclass('schema_migrations') IS NOT NULL")
          : tx.Exec(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                "name = 'schema_migrations'");
  if (!r.ok()) return r.status();
  const SqlRow& row = r->rows.at(0);
  if (dialect == Dialect::kPostgres) return row.Text(0) == "t";
  return row.Int(0) > 0;
}

absl::StatusOr<int> VersionIn(SqlTx& tx, Dialect dialect) {
  absl::StatusOr<bool> exists = MigrationsTableExists(tx, dialect);
  if (!exists.ok()) return exists.status();
  if (!*exists) return 0;
  absl::StatusOr<SqlResult> r =
      tx.Exec("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  if (!r.ok()) return r.status();
  return static_cast<int>(r->rows.at(0).Int(0));
}

}  // namespace

absl::Span<const Migration> AllMigrations() { return kMigrations; }

absl::StatusOr<int> CurrentSchemaVersion(SqlDriver& driver) {
  int version = 0;
  absl::Status status = driver.Transact(
      "SchemaVersion", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        absl::StatusOr<int> v = VersionIn(tx, driver.dialect());
        if (!v.ok()) return v.status();
        version = *v;
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return version;
}

absl::Status ApplyMigrations(SqlDriver& driver,
                             absl::Span<const Migration> migrations,
                             int64_t now_us) {
  const int latest = migrations.empty() ? 0 : migrations.back().version;
  return driver.Transact(
      "Migrate", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
        if (driver.dialect() == Dialect::kPostgres) {
          // Serializes concurrent migrations (several replicas starting).
          absl::StatusOr<SqlResult> lock =
              tx.Exec("SELECT pg_advisory_xact_lock(7420514470001)");
          if (!lock.ok()) return lock.status();
        }
        absl::StatusOr<int> current = VersionIn(tx, driver.dialect());
        if (!current.ok()) return current.status();
        if (*current > latest) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the database schema is at version ", *current,
              ", newer than this binary's latest migration ", latest,
              ": run a newer densegate against this database"));
        }
        if (*current == latest) return absl::OkStatus();
        if (absl::Status s = tx.ExecScript(kMigrationsTable); !s.ok()) return s;
        for (const Migration& m : migrations) {
          if (m.version <= *current) continue;
          if (absl::Status s = tx.ExecScript(m.sql(driver.dialect()));
              !s.ok()) {
            return absl::Status(
                s.code(), absl::StrCat("migration ", m.version, " (", m.name,
                                       ") failed: ", s.message()));
          }
          absl::StatusOr<SqlResult> r = tx.Exec(
              "INSERT INTO schema_migrations (version, name, applied_at_us) "
              "VALUES ($1, $2, $3)",
              {m.version, m.name, now_us});
          if (!r.ok()) return r.status();
        }
        return absl::OkStatus();
      });
}

}  // namespace densegate::results::internal
