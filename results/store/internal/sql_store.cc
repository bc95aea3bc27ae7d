// The SQL store: the private helpers its aggregates share (transactions,
// row conversions, lease checks, the claim and finish statements with
// PostgreSQL's batched paths), and OpenSqlStore. The Store methods live in
// sql_store_<aggregate>.cc; the class in sql_store_impl.h.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal {
namespace sql_store_impl {

absl::string_view SqlStore::backend() const { return dialect_.name(); }

absl::Status SqlStore::Migrate() {
  return ApplyMigrations(*driver_, AllMigrations(), NowUs());
}

absl::StatusOr<int> SqlStore::SchemaVersion() {
  return CurrentSchemaVersion(*driver_);
}

absl::Status SqlStore::Run(absl::string_view op, TxMode mode,
                 absl::FunctionRef<absl::Status(SqlTx&)> fn) {
  return driver_->Transact(op, mode, fn);
}

absl::Status SqlStore::ValidateRequirements(const JobRequirements& r) {
  if (r.min_accelerator_count < 0 || r.min_accelerator_memory_bytes < 0) {
    return Invalid("requirements have a negative minimum");
  }
  if (!(r.max_node_noise >= 0) || !std::isfinite(r.max_node_noise)) {
    return Invalid("requirements have a noise limit that is not a non-negative number");
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SqlStore::UpsertRepo(SqlTx& tx, absl::string_view url,
                                   int64_t now) {
  DG_RETURN_IF_ERROR(
      tx.Exec("INSERT INTO repos (url, created_at_us) VALUES ($1, $2) ON "
              "CONFLICT (url) DO NOTHING",
              {url, now})
          .status());
  DG_ASSIGN_OR_RETURN(SqlResult r,
                      tx.Exec("SELECT id FROM repos WHERE url = $1", {url}));
  if (r.rows.empty()) return absl::InternalError("repository row vanished");
  return r.rows[0].Int(0);
}

absl::Status SqlStore::AuditTx(SqlTx& tx, int64_t now, absl::string_view actor,
                     absl::string_view action, absl::string_view subject,
                     absl::string_view detail) {
  return tx
      .Exec(
          "INSERT INTO audit_log (at_us, actor, action, subject, detail) "
          "VALUES ($1, $2, $3, $4, $5)",
          {now, actor, action, subject, detail})
      .status();
}

absl::Status SqlStore::RequireEvaluation(SqlTx& tx, absl::string_view id) {
  DG_ASSIGN_OR_RETURN(
      SqlResult r, tx.Exec("SELECT id FROM evaluations WHERE id = $1", {id}));
  if (r.rows.empty()) {
    return absl::NotFoundError(absl::StrCat("evaluation ", id, " not found"));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Evaluation> SqlStore::EvaluationFromRow(const SqlRow& row) {
  v1::Evaluation e;
  e.set_id(row.Text(0));
  e.set_state(static_cast<v1::EvaluationState>(row.Int(1)));
  e.set_node_id(row.Text(2));
  e.set_attempt(static_cast<int32_t>(row.Int(3)));
  *e.mutable_created_at() = ToProto(row.Int(4));
  *e.mutable_updated_at() = ToProto(row.Int(5));
  DG_ASSIGN_OR_RETURN(*e.mutable_candidate(),
                      Parse<v1::Candidate>(row.Bytes(6), "candidate"));
  if (!row.IsNull(7)) {
    DG_ASSIGN_OR_RETURN(*e.mutable_verdict(),
                        Parse<v1::Verdict>(row.Bytes(7), "verdict"));
    e.mutable_verdict()->set_evaluation_id(e.id());
    e.mutable_verdict()->set_candidate_id(e.candidate().id());
  }
  v1::MergeStatus* m = e.mutable_merge();
  if (row.IsNull(8)) {
    m->set_state(v1::NOT_MERGING);
  } else {
    m->set_state(static_cast<v1::MergeState>(row.Int(8)));
    m->set_merged_sha(row.Text(9));
    m->set_remeasure_evaluation_id(row.Text(10));
    m->set_message(row.Text(11));
    m->set_approved_by(row.Text(13));
  }
  return e;
}

absl::StatusOr<v1::Evaluation> SqlStore::LoadEvaluation(SqlTx& tx, absl::string_view id,
                                              bool with_stages) {
  DG_ASSIGN_OR_RETURN(
      SqlResult r,
      tx.Exec(absl::StrCat(kEvaluationSelect, "WHERE e.id = $1"), {id}));
  if (r.rows.empty()) {
    return absl::NotFoundError(absl::StrCat("evaluation ", id, " not found"));
  }
  DG_ASSIGN_OR_RETURN(v1::Evaluation e, EvaluationFromRow(r.rows[0]));
  if (with_stages) {
    DG_ASSIGN_OR_RETURN(SqlResult s,
                        tx.Exec("SELECT kind, proto FROM stages WHERE "
                                "evaluation_id = $1 ORDER BY id",
                                {id}));
    std::map<int64_t, std::string> latest;  // kind -> proto; later wins
    for (const SqlRow& row : s.rows) latest[row.Int(0)] = row.Bytes(1);
    for (const auto& [kind, bytes] : latest) {
      DG_ASSIGN_OR_RETURN(*e.add_stages(), Parse<v1::Stage>(bytes, "stage"));
    }
  }
  return e;
}

absl::StatusOr<v1::Node> SqlStore::NodeFromRow(const SqlRow& row) {
  v1::Node n;
  n.set_id(row.Text(0));
  n.set_name(row.Text(1));
  DG_ASSIGN_OR_RETURN(
      *n.mutable_dimensions(),
      Parse<v1::NodeDimensions>(row.Bytes(2), "node dimensions"));
  n.set_state(static_cast<v1::NodeState>(row.Int(3)));
  n.set_calibration_noise(row.Double(4));
  if (row.Int(5) != 0) *n.mutable_last_heartbeat() = ToProto(row.Int(5));
  n.set_current_lease_id(row.Text(6));
  return n;
}

absl::StatusOr<v1::Node> SqlStore::LoadNode(SqlTx& tx, absl::string_view id) {
  DG_ASSIGN_OR_RETURN(
      SqlResult r,
      tx.Exec(absl::StrCat(kNodeSelect, " WHERE n.id = $1"), {id}));
  if (r.rows.empty())
    return absl::NotFoundError(absl::StrCat("node ", id, " not found"));
  return NodeFromRow(r.rows[0]);
}

MergeEntry SqlStore::MergeFromRow(const SqlRow& row) {
  MergeEntry m;
  m.position = row.Int(0);
  m.evaluation_id = row.Text(1);
  m.repo = row.Text(2);
  m.target_branch = row.Text(3);
  m.status.set_state(static_cast<v1::MergeState>(row.Int(4)));
  m.status.set_merged_sha(row.Text(5));
  m.status.set_remeasure_evaluation_id(row.Text(6));
  m.status.set_message(row.Text(7));
  m.created_at = FromUs(row.Int(8));
  m.updated_at = FromUs(row.Int(9));
  m.status.set_approved_by(row.Text(10));
  return m;
}

absl::StatusOr<MergeEntry> SqlStore::LoadMerge(SqlTx& tx,
                                     absl::string_view evaluation_id) {
  DG_ASSIGN_OR_RETURN(
      SqlResult r,
      tx.Exec(absl::StrCat(kMergeSelect, " WHERE m.evaluation_id = $1"),
              {evaluation_id}));
  if (r.rows.empty()) {
    return absl::NotFoundError(absl::StrCat("evaluation ", evaluation_id,
                                            " is not in the merge queue"));
  }
  return MergeFromRow(r.rows[0]);
}

absl::StatusOr<std::vector<SqlStore::Claimed>> SqlStore::ClaimInTx(SqlTx& tx,
                                               const std::string& node_id,
                                               const v1::NodeDimensions& d,
                                               int limit, int64_t now,
                                               int64_t expires) {
  std::vector<Claimed> claimed;
  if (dialect_.OneStatementWrites()) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(PgClaim(limit), PgClaimArgs(node_id, d, now, expires)));
    for (const SqlRow& row : r.rows)
      claimed.push_back(ClaimedFromRow(row, 0));
    return claimed;
  }
  // SQLite: the write transaction is exclusive, so select then update.
  // (UPDATE ... WHERE id IN (SELECT ... LIMIT) RETURNING would build
  // three temporary tables per claim.)
  DG_ASSIGN_OR_RETURN(
      SqlResult r,
      tx.Exec(kSqliteClaim, {d.accelerator_kind(), d.accelerator_count(),
                             d.accelerator_memory_bytes(), d.fingerprint(),
                             node_id, limit}));
  for (const SqlRow& row : r.rows) {
    const int64_t job = row.Int(0);
    const int attempts = static_cast<int>(row.Int(3)) + 1;
    claimed.push_back({job, static_cast<int>(row.Int(1)), row.Text(2),
                       attempts, absl::StrCat("lease-", job, "-", attempts),
                       static_cast<int>(row.Int(4)),
                       static_cast<int>(row.Int(5)), 0, ""});
  }
  for (Claimed& c : claimed) {
    DG_RETURN_IF_ERROR(
        tx.Exec("UPDATE jobs SET state = $2, attempts = $3, "
                "current_lease_id = $4, updated_at_us = $5 WHERE id = $1",
                {c.job_id, kJobLeased, c.attempts, c.lease_id, now})
            .status());
    DG_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO leases (id, job_id, job_kind, evaluation_id, "
                "node_id, attempt, state, granted_at_us, expires_at_us) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                {c.lease_id, c.job_id, c.kind,
                 c.evaluation_id.empty() ? SqlValue()
                                         : SqlValue(c.evaluation_id),
                 node_id, c.attempts, kLeaseActive, now, expires})
            .status());
    if (c.evaluation_id.empty()) continue;
    DG_RETURN_IF_ERROR(
        tx.Exec("UPDATE evaluations SET state = $2, node_id = $3, attempt "
                "= $4, updated_at_us = $5 WHERE id = $1",
                {c.evaluation_id, static_cast<int>(v1::RUNNING), node_id,
                 c.attempts, now})
            .status());
    DG_ASSIGN_OR_RETURN(
        SqlResult e,
        tx.Exec("SELECT e.created_at_us, c.proto FROM evaluations e JOIN "
                "candidates c ON c.id = e.candidate_id WHERE e.id = $1",
                {c.evaluation_id}));
    if (e.rows.empty()) {
      return absl::InternalError(absl::StrCat(
          "job ", c.job_id, " names missing evaluation ", c.evaluation_id));
    }
    c.created_at_us = e.rows[0].Int(0);
    c.candidate = e.rows[0].Bytes(1);
  }
  return claimed;
}

SqlStore::Claimed SqlStore::ClaimedFromRow(const SqlRow& row, int first) {
  return {row.Int(first),
          static_cast<int>(row.Int(first + 1)),
          row.Text(first + 2),
          static_cast<int>(row.Int(first + 3)),
          row.Text(first + 4),
          static_cast<int>(row.Int(first + 5)),
          static_cast<int>(row.Int(first + 6)),
          row.Int(first + 7),
          row.Bytes(first + 8)};
}

absl::StatusOr<std::vector<v1::Lease>> SqlStore::LeasesFrom(
    std::vector<Claimed> claimed, const std::string& node_id, int64_t now,
    int64_t expires) {
  std::sort(
      claimed.begin(), claimed.end(), [](const Claimed& a, const Claimed& b) {
        return std::make_tuple(a.priority_class, -a.priority, a.job_id) <
               std::make_tuple(b.priority_class, -b.priority, b.job_id);
      });
  std::vector<v1::Lease> leases;
  leases.reserve(claimed.size());
  for (const Claimed& c : claimed) {
    v1::Lease lease;
    lease.set_id(c.lease_id);
    lease.set_job_kind(static_cast<v1::JobKind>(c.kind));
    *lease.mutable_expires_at() = ToProto(expires);
    if (!c.evaluation_id.empty()) {
      v1::Evaluation* e = lease.mutable_evaluation();
      e->set_id(c.evaluation_id);
      DG_ASSIGN_OR_RETURN(*e->mutable_candidate(),
                          Parse<v1::Candidate>(c.candidate, "candidate"));
      e->set_state(v1::RUNNING);
      e->set_node_id(node_id);
      e->set_attempt(c.attempts);
      *e->mutable_created_at() = ToProto(c.created_at_us);
      *e->mutable_updated_at() = ToProto(now);
    }
    leases.push_back(std::move(lease));
  }
  return leases;
}

absl::StatusOr<SqlStore::StoredVerdict> SqlStore::PrepareVerdict(
    const LeaseRef& ref, const v1::Verdict& verdict, int64_t now) {
  DG_RETURN_IF_ERROR(ValidateRef(ref));
  if (verdict.decision() != v1::ACCEPT && verdict.decision() != v1::REJECT &&
      verdict.decision() != v1::INCONCLUSIVE) {
    return Invalid(absl::StrCat(
        "verdict.decision must be ACCEPT, REJECT or INCONCLUSIVE, got ",
        v1::Decision_Name(verdict.decision())));
  }
  absl::flat_hash_set<std::string> metrics;
  for (const v1::MetricComparison& m : verdict.metrics()) {
    if (m.metric().empty())
      return Invalid("verdict.metrics has an empty metric name");
    if (!metrics.insert(m.metric()).second) {
      return Invalid(
          absl::StrCat("verdict.metrics names '", m.metric(), "' twice"));
    }
  }
  StoredVerdict out{verdict,
                    {verdict.provenance().sample_ids().begin(),
                     verdict.provenance().sample_ids().end()}};
  v1::Verdict& v = out.verdict;
  if (!v.has_decided_at()) *v.mutable_decided_at() = ToProto(now);
  if (v.provenance().node_id().empty()) {
    v.mutable_provenance()->set_node_id(ref.node_id);
  }
  return out;
}

absl::Status SqlStore::FinishInTx(SqlTx& tx, const LeaseRef& ref,
                        const StoredVerdict& stored, int64_t now) {
  const v1::Verdict& v = stored.verdict;
  const std::set<int64_t>& sample_ids = stored.sample_ids;
  DG_ASSIGN_OR_RETURN(LeaseRow lease, LockLiveLease(tx, ref, now));
  if (lease.job_kind != v1::EVALUATION) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.id,
        " is a calibration lease: end it with FinishCalibration"));
  }
  DG_ASSIGN_OR_RETURN(
      SqlResult e,
      tx.Exec("SELECT candidate_id FROM evaluations WHERE id = $1",
              {lease.evaluation_id}));
  if (e.rows.empty()) {
    return absl::InternalError(
        absl::StrCat("lease ", lease.id, " names a missing evaluation"));
  }
  const std::string candidate_id = e.rows[0].Text(0);
  if (!v.evaluation_id().empty() &&
      v.evaluation_id() != lease.evaluation_id) {
    return Invalid(absl::StrCat("verdict.evaluation_id ", v.evaluation_id(),
                                " does not match lease ", lease.id,
                                " (evaluation ", lease.evaluation_id, ")"));
  }
  if (!v.candidate_id().empty() && v.candidate_id() != candidate_id) {
    return Invalid(absl::StrCat("verdict.candidate_id ", v.candidate_id(),
                                " does not match the evaluation's candidate ",
                                candidate_id));
  }
  if (!sample_ids.empty()) {
    std::vector<int64_t> ids(sample_ids.begin(), sample_ids.end());
    DG_ASSIGN_OR_RETURN(
        SqlResult found,
        tx.Exec(absl::StrCat("SELECT id FROM samples WHERE evaluation_id = "
                             "$1 AND id IN (",
                             dialect_.SelectIds(2), ")"),
                {lease.evaluation_id, dialect_.IdArray(ids)}));
    if (found.rows.size() != ids.size()) {
      std::set<int64_t> have;
      for (const SqlRow& row : found.rows) have.insert(row.Int(0));
      std::vector<int64_t> missing;
      for (int64_t id : ids) {
        if (!have.count(id)) missing.push_back(id);
      }
      return Invalid(absl::StrCat(
          "verdict.provenance.sample_ids: ", missing.size(), " of ",
          ids.size(), " ids are not samples of evaluation ",
          lease.evaluation_id, " (first: ", missing.at(0),
          "); a verdict must name the samples it was computed from"));
    }
  }
  const int64_t decided = FromProto(v.decided_at());
  const v1::Provenance& p = v.provenance();
  int64_t seed = 0;
  uint64_t useed = p.statistics_seed();
  std::memcpy(&seed, &useed, sizeof(seed));
  DG_RETURN_IF_ERROR(
      tx.Exec("INSERT INTO verdicts (evaluation_id, candidate_id, lease_id, "
              "decision, policy, manifest_hash, node_id, node_fingerprint, "
              "software_version, statistics_seed, decided_at_us, proto) "
              "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
              {lease.evaluation_id, candidate_id, lease.id,
               static_cast<int>(v.decision()), static_cast<int>(v.policy()),
               p.manifest_hash(), p.node_id(), p.node_fingerprint(),
               p.software_version(), seed, decided,
               Bytes{v.SerializeAsString()}})
          .status());
  if (!sample_ids.empty()) {
    std::vector<int64_t> ids(sample_ids.begin(), sample_ids.end());
    DG_RETURN_IF_ERROR(
        tx.Exec(dialect_.InsertVerdictSamples(),
                {lease.evaluation_id, dialect_.IdArray(ids)})
            .status());
  }
  for (const v1::MetricComparison& m : v.metrics()) {
    DG_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO metric_comparisons (evaluation_id, metric, "
                "unit, direction, is_primary, baseline, candidate, speedup, "
                "ci_low, ci_high, n_pairs, p_value, significant, "
                "flagged_for_review, decided_at_us, proto) VALUES ($1, $2, "
                "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, "
                "$16)",
                {lease.evaluation_id, m.metric(), m.unit(),
                 static_cast<int>(m.direction()), m.primary() ? 1 : 0,
                 m.baseline(), m.candidate(), m.speedup(), m.ci_low(),
                 m.ci_high(), m.n_pairs(), m.p_value(),
                 m.significant() ? 1 : 0, m.flagged_for_review() ? 1 : 0,
                 decided, Bytes{m.SerializeAsString()}})
            .status());
  }
  return EndLease(tx, lease, now, v1::FINISHED, "finished");
}

int64_t SqlStore::SeedColumn(const v1::Verdict& v) {
  int64_t seed = 0;
  const uint64_t useed = v.provenance().statistics_seed();
  std::memcpy(&seed, &useed, sizeof(seed));
  return seed;
}

std::vector<SqlValue> SqlStore::PgFinishArgs(const LeaseRef& ref,
                                          const StoredVerdict& stored,
                                          int64_t now) {
  const v1::Verdict& v = stored.verdict;
  const std::set<int64_t>& sample_ids = stored.sample_ids;
  const v1::Provenance& p = v.provenance();
  std::vector<SqlValue> args = {
      ref.lease_id,
      ref.node_id,
      now,
      v.evaluation_id(),
      v.candidate_id(),
      PgArray(std::vector<int64_t>(sample_ids.begin(), sample_ids.end())),
      static_cast<int>(v.decision()),
      static_cast<int>(v.policy()),
      p.manifest_hash(),
      p.node_id(),
      p.node_fingerprint(),
      p.software_version(),
      SeedColumn(v),
      FromProto(v.decided_at()),
      Bytes{v.SerializeAsString()}};
  PgComparisonArrays comparisons;
  comparisons.Add(v, 1);
  comparisons.AppendTo(args);
  return args;
}

std::vector<SqlValue> SqlStore::PgFinishBatchArgs(
    absl::Span<FinishBatchItem* const> batch, int64_t now) {
  std::vector<std::string> lease, node, evaluation, candidate, manifest,
      provenance_node, fingerprint, software, proto;
  std::vector<int64_t> decision, policy, seed, decided, expires, sample_item,
      sample_id;
  PgComparisonArrays comparisons;
  for (size_t i = 0; i < batch.size(); ++i) {
    const FinishBatchItem& item = *batch[i];
    const v1::Verdict& v = item.verdict->verdict;
    const v1::Provenance& p = v.provenance();
    lease.push_back(item.ref->lease_id);
    node.push_back(item.ref->node_id);
    evaluation.push_back(v.evaluation_id());
    candidate.push_back(v.candidate_id());
    decision.push_back(static_cast<int>(v.decision()));
    policy.push_back(static_cast<int>(v.policy()));
    manifest.push_back(p.manifest_hash());
    provenance_node.push_back(p.node_id());
    fingerprint.push_back(p.node_fingerprint());
    software.push_back(p.software_version());
    seed.push_back(SeedColumn(v));
    decided.push_back(FromProto(v.decided_at()));
    proto.push_back(absl::StrCat("\\x", HexEncode(v.SerializeAsString())));
    expires.push_back(item.expires_at_us);
    for (int64_t id : item.verdict->sample_ids) {
      sample_item.push_back(static_cast<int64_t>(i) + 1);
      sample_id.push_back(id);
    }
    comparisons.Add(v, static_cast<int64_t>(i) + 1);
  }
  std::vector<SqlValue> args = {now,
                                PgArray(lease),
                                PgArray(node),
                                PgArray(evaluation),
                                PgArray(candidate),
                                PgArray(decision),
                                PgArray(policy),
                                PgArray(manifest),
                                PgArray(provenance_node),
                                PgArray(fingerprint),
                                PgArray(software),
                                PgArray(seed),
                                PgArray(decided),
                                PgArray(proto),
                                PgArray(expires),
                                PgArray(sample_item),
                                PgArray(sample_id),
                                PgArray(comparisons.item)};
  comparisons.AppendTo(args);
  return args;
}

void SqlStore::RunFinishBatch(absl::Span<FinishBatchItem* const> batch) {
  ConcurrencyLimit::Turn turn(claims_);
  const absl::Status status = ExecFinishBatch(batch);
  if (status.ok() || batch.size() == 1 || absl::IsUnavailable(status)) {
    for (FinishBatchItem* item : batch) item->status = status;
    return;
  }
  for (FinishBatchItem* item : batch) item->status = ExecFinishBatch({item});
}

absl::Status SqlStore::ExecFinishBatch(absl::Span<FinishBatchItem* const> batch) {
  finish_statements_.fetch_add(1, std::memory_order_relaxed);
  finish_statement_leases_.fetch_add(static_cast<int64_t>(batch.size()),
                                     std::memory_order_relaxed);
  const int64_t now = NowUs();
  for (FinishBatchItem* item : batch) {
    item->now_us = now;
    item->expires_at_us =
        now + absl::ToInt64Microseconds(item->lease_duration);
  }
  if (batch.size() == 1) return ExecFinishOne(*batch.front());
  DG_ASSIGN_OR_RETURN(
      SqlResult r, driver_->ExecPipelined("FinishLeaseAndClaimNext",
                                          PgFinishAndClaimBatch(batch.size()),
                                          PgFinishBatchArgs(batch, now)));
  if (r.rows.size() != batch.size()) {
    return absl::InternalError(absl::StrCat("a batch of ", batch.size(),
                                            " finishes returned ",
                                            r.rows.size(), " rows"));
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const SqlRow& row = r.rows[i];
    FinishBatchItem& item = *batch[i];
    item.ended = row.Int(1) == 1;
    item.node_state.reset();
    if (!row.IsNull(2)) {
      item.node_state = static_cast<v1::NodeState>(row.Int(2));
    }
    item.batched = row.Int(3) == 1;
    item.claimed.clear();
    if (!row.IsNull(4)) item.claimed.push_back(ClaimedFromRow(row, 4));
  }
  return absl::OkStatus();
}

absl::Status SqlStore::ExecFinishOne(FinishBatchItem& item) {
  std::vector<SqlValue> args =
      PgFinishArgs(*item.ref, *item.verdict, item.now_us);
  args.push_back(item.expires_at_us);
  DG_ASSIGN_OR_RETURN(SqlResult r,
                      driver_->ExecPipelined("FinishLeaseAndClaimNext",
                                             PgFinishAndClaim(), args));
  // One row per claimed job, or one without: whether the lease was
  // finished, the node's state, then kPgClaim's columns.
  const SqlRow& first = r.rows.at(0);
  item.ended = first.Int(0) == 1;
  item.node_state.reset();
  if (!first.IsNull(1)) {
    item.node_state = static_cast<v1::NodeState>(first.Int(1));
  }
  item.batched = true;
  item.claimed.clear();
  for (const SqlRow& row : r.rows) {
    if (!row.IsNull(2)) item.claimed.push_back(ClaimedFromRow(row, 2));
  }
  return absl::OkStatus();
}

absl::StatusOr<LeaseRow> SqlStore::LockLiveLease(SqlTx& tx, const LeaseRef& ref,
                                       int64_t now) {
  DG_ASSIGN_OR_RETURN(
      SqlResult r,
      tx.Exec(absl::StrCat(kLeaseColumns, dialect_.RowLock()), {ref.lease_id}));
  if (r.rows.empty()) {
    return absl::NotFoundError(
        absl::StrCat("lease ", ref.lease_id, " not found"));
  }
  LeaseRow lease = LeaseFromRow(r.rows[0]);
  DG_RETURN_IF_ERROR(CheckLive(lease, ref, now));
  if (!dialect_.LockJobRow().empty()) {
    DG_RETURN_IF_ERROR(tx.Exec(dialect_.LockJobRow(), {lease.job_id}).status());
  }
  return lease;
}

absl::StatusOr<LeaseRow> SqlStore::SharedLiveLease(SqlTx& tx, const LeaseRef& ref,
                                         int64_t now) {
  DG_ASSIGN_OR_RETURN(
      SqlResult r,
      tx.Exec(absl::StrCat(kLeaseColumns, dialect_.SharedRowLock()),
              {ref.lease_id}));
  if (r.rows.empty()) {
    return absl::NotFoundError(
        absl::StrCat("lease ", ref.lease_id, " not found"));
  }
  LeaseRow lease = LeaseFromRow(r.rows[0]);
  DG_RETURN_IF_ERROR(CheckLive(lease, ref, now));
  if (lease.job_kind != v1::EVALUATION) {
    return absl::FailedPreconditionError(absl::StrCat(
        "lease ", lease.id,
        " is a calibration lease; it records no stages or samples"));
  }
  return lease;
}

absl::Status SqlStore::EndLease(SqlTx& tx, const LeaseRow& lease, int64_t now,
                      v1::EvaluationState state, absl::string_view reason) {
  DG_RETURN_IF_ERROR(
      tx.Exec("UPDATE leases SET state = $2, ended_at_us = $3, end_reason = "
              "$4 WHERE id = $1",
              {lease.id, kLeaseFinished, now, reason})
          .status());
  DG_RETURN_IF_ERROR(tx.Exec("UPDATE jobs SET state = $2, updated_at_us = $3 "
                             "WHERE id = $1",
                             {lease.job_id, kJobDone, now})
                         .status());
  if (lease.evaluation_id.empty()) return absl::OkStatus();
  return tx
      .Exec(
          "UPDATE evaluations SET state = $2, updated_at_us = $3 WHERE id = "
          "$1",
          {lease.evaluation_id, static_cast<int>(state), now})
      .status();
}

absl::StatusOr<v1::EvaluationState> SqlStore::ReleaseJob(SqlTx& tx,
                                               const LeaseRow& lease,
                                               int lease_state,
                                               absl::string_view reason,
                                               int64_t now) {
  DG_RETURN_IF_ERROR(
      tx.Exec("UPDATE leases SET state = $2, ended_at_us = $3, end_reason = "
              "$4 WHERE id = $1",
              {lease.id, lease_state, now, reason})
          .status());
  DG_ASSIGN_OR_RETURN(
      SqlResult j,
      tx.Exec("SELECT attempts, max_attempts, state FROM jobs WHERE id = $1",
              {lease.job_id}));
  if (j.rows.empty()) return absl::InternalError("leased job vanished");
  if (j.rows[0].Int(2) != kJobLeased) {
    return absl::InternalError(absl::StrCat(
        "job ", lease.job_id, " of live lease ", lease.id, " is ",
        JobStateName(static_cast<int>(j.rows[0].Int(2)))));
  }
  const bool dead = j.rows[0].Int(0) >= j.rows[0].Int(1);
  DG_RETURN_IF_ERROR(
      tx.Exec("UPDATE jobs SET state = $2, current_lease_id = '', last_error "
              "= $3, updated_at_us = $4 WHERE id = $1",
              {lease.job_id, dead ? kJobDead : kJobQueued, reason, now})
          .status());
  const v1::EvaluationState state = dead ? v1::DEAD : v1::QUEUED;
  if (!lease.evaluation_id.empty()) {
    DG_RETURN_IF_ERROR(
        tx.Exec("UPDATE evaluations SET state = $2, updated_at_us = $3 WHERE "
                "id = $1",
                {lease.evaluation_id, static_cast<int>(state), now})
            .status());
  }
  return state;
}

}  // namespace sql_store_impl

using sql_store_impl::SqlStore;


absl::StatusOr<std::unique_ptr<Store>> OpenSqlStore(
    std::unique_ptr<SqlDriver> driver, const StoreOptions& options,
    SqlStoreHooks hooks) {
  auto store =
      std::make_unique<SqlStore>(std::move(driver), options, std::move(hooks));
  const int latest = AllMigrations().back().version;
  if (options.migrate) {
    DG_RETURN_IF_ERROR(store->Migrate());
  } else {
    DG_ASSIGN_OR_RETURN(int version, store->SchemaVersion());
    if (version != latest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the database schema is at version ", version,
          " but this binary needs ", latest,
          version < latest ? ": run `densegate db migrate` against this store"
                           : ": run a newer densegate against this database"));
    }
  }
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace densegate::results::internal

