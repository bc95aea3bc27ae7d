// What an evaluation records: stages, samples, verdicts and comparisons.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

absl::Status SqlStore::RecordStage(const LeaseRef& ref,
                         const v1::Stage& stage) {
  DG_RETURN_IF_ERROR(ValidateRef(ref));
  if (stage.kind() == v1::STAGE_KIND_UNSPECIFIED)
    return Invalid("stage.kind is unspecified");
  if (stage.status() == v1::STAGE_STATUS_UNSPECIFIED) {
    return Invalid("stage.status is unspecified");
  }
  if (!Finite(stage.seconds()) || stage.seconds() < 0) {
    return Invalid("stage.seconds must be finite and >= 0");
  }
  const int64_t now = NowUs();
  return Run("RecordStage", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
    DG_ASSIGN_OR_RETURN(LeaseRow lease, SharedLiveLease(tx, ref, now));
    return tx
        .Exec(
            "INSERT INTO stages (evaluation_id, lease_id, attempt, kind, "
            "status, started_at_us, seconds, log_uri, summary, "
            "recorded_at_us, proto) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
            "$9, $10, $11)",
            {lease.evaluation_id, lease.id, lease.attempt,
             static_cast<int>(stage.kind()), static_cast<int>(stage.status()),
             stage.has_started_at() ? FromProto(stage.started_at())
                                    : int64_t{0},
             stage.seconds(), stage.log_uri(), stage.summary(), now,
             Bytes{stage.SerializeAsString()}})
        .status();
  });
}

absl::StatusOr<std::vector<StageRecord>> SqlStore::ListStages(
    absl::string_view evaluation_id) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  std::vector<StageRecord> out;
  DG_RETURN_IF_ERROR(
      Run("ListStages", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
        DG_ASSIGN_OR_RETURN(
            SqlResult r,
            tx.Exec(
                "SELECT id, lease_id, attempt, recorded_at_us, proto FROM "
                "stages WHERE evaluation_id = $1 ORDER BY id",
                {evaluation_id}));
        for (const SqlRow& row : r.rows) {
          StageRecord rec;
          rec.id = row.Int(0);
          rec.evaluation_id = std::string(evaluation_id);
          rec.lease_id = row.Text(1);
          rec.attempt = static_cast<int32_t>(row.Int(2));
          rec.recorded_at = FromUs(row.Int(3));
          DG_ASSIGN_OR_RETURN(rec.stage,
                              Parse<v1::Stage>(row.Bytes(4), "stage"));
          out.push_back(std::move(rec));
        }
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<int64_t>> SqlStore::AppendSamples(
    const LeaseRef& ref, absl::Span<const v1::Sample> samples) {
  DG_RETURN_IF_ERROR(ValidateRef(ref));
  if (samples.empty()) return Invalid("no samples to append");
  std::set<std::tuple<std::string, int, int>> keys;
  for (size_t i = 0; i < samples.size(); ++i) {
    const v1::Sample& s = samples[i];
    const std::string at = absl::StrCat("samples[", i, "]");
    if (s.id() != 0)
      return Invalid(absl::StrCat(at, ".id is set; the store assigns ids"));
    if (s.metric().empty())
      return Invalid(absl::StrCat(at, ".metric is empty"));
    if (s.arm() != v1::BASELINE && s.arm() != v1::CANDIDATE) {
      return Invalid(absl::StrCat(at, ".arm must be BASELINE or CANDIDATE"));
    }
    if (s.pair_index() < 0)
      return Invalid(absl::StrCat(at, ".pair_index is negative"));
    if (!Finite(s.value()) || !Finite(s.process_wall_seconds()) ||
        !Finite(s.process_cpu_seconds())) {
      return Invalid(
          absl::StrCat(at, ": value and process times must be finite"));
    }
    if (!keys.insert({s.metric(), s.arm(), s.pair_index()}).second) {
      return Invalid(absl::StrCat(at, " repeats metric '", s.metric(), "' ",
                                  v1::Arm_Name(s.arm()), " pair ",
                                  s.pair_index(), " of an earlier sample"));
    }
  }
  const int64_t now = NowUs();
  std::vector<int64_t> ids;
  DG_RETURN_IF_ERROR(
      Run("AppendSamples", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
        ids.clear();
        DG_ASSIGN_OR_RETURN(LeaseRow lease, SharedLiveLease(tx, ref, now));
        for (size_t i = 0; i < samples.size(); ++i) {
          const v1::Sample& s = samples[i];
          if (!s.evaluation_id().empty() &&
              s.evaluation_id() != lease.evaluation_id) {
            return Invalid(absl::StrCat("samples[", i, "].evaluation_id ",
                                        s.evaluation_id(), " is not lease ",
                                        lease.id, "'s evaluation ",
                                        lease.evaluation_id));
          }
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(
                  "INSERT INTO samples (evaluation_id, lease_id, metric, "
                  "arm, "
                  "pair_index, value, unit, process_wall_seconds, "
                  "process_cpu_seconds, recorded_at_us) VALUES ($1, $2, $3, "
                  "$4, $5, $6, $7, $8, $9, $10) RETURNING id",
                  {lease.evaluation_id, lease.id, s.metric(),
                   static_cast<int>(s.arm()), s.pair_index(), s.value(),
                   s.unit(), s.process_wall_seconds(),
                   s.process_cpu_seconds(),
                   s.has_recorded_at() ? FromProto(s.recorded_at()) : now}));
          ids.push_back(r.rows.at(0).Int(0));
        }
        return absl::OkStatus();
      }));
  return ids;
}

absl::StatusOr<std::vector<v1::Sample>> SqlStore::ListSamples(
    absl::string_view evaluation_id) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  std::vector<v1::Sample> out;
  DG_RETURN_IF_ERROR(
      Run("ListSamples", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
        DG_ASSIGN_OR_RETURN(
            SqlResult r,
            tx.Exec(
                "SELECT id, metric, arm, pair_index, value, unit, "
                "process_wall_seconds, process_cpu_seconds, recorded_at_us "
                "FROM samples WHERE evaluation_id = $1 ORDER BY id",
                {evaluation_id}));
        for (const SqlRow& row : r.rows) {
          v1::Sample s;
          s.set_id(row.Int(0));
          s.set_evaluation_id(std::string(evaluation_id));
          s.set_metric(row.Text(1));
          s.set_arm(static_cast<v1::Arm>(row.Int(2)));
          s.set_pair_index(static_cast<int32_t>(row.Int(3)));
          s.set_value(row.Double(4));
          s.set_unit(row.Text(5));
          s.set_process_wall_seconds(row.Double(6));
          s.set_process_cpu_seconds(row.Double(7));
          *s.mutable_recorded_at() = ToProto(row.Int(8));
          out.push_back(std::move(s));
        }
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<v1::Verdict> SqlStore::GetVerdict(
    absl::string_view evaluation_id) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  v1::Verdict out;
  DG_RETURN_IF_ERROR(
      Run("GetVerdict", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(
            SqlResult r,
            tx.Exec("SELECT proto, candidate_id FROM verdicts WHERE "
                    "evaluation_id = $1",
                    {evaluation_id}));
        if (r.rows.empty()) {
          DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
          return absl::NotFoundError(absl::StrCat(
              "evaluation ", evaluation_id, " has no verdict yet"));
        }
        DG_ASSIGN_OR_RETURN(
            out, Parse<v1::Verdict>(r.rows[0].Bytes(0), "verdict"));
        out.set_evaluation_id(std::string(evaluation_id));
        out.set_candidate_id(r.rows[0].Text(1));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<MetricComparisonRecord>> SqlStore::ListMetricComparisons(
    const MetricHistoryFilter& filter) {
  if (filter.metric.empty() && filter.evaluation_id.empty()) {
    return Invalid("set metric or evaluation_id");
  }
  if (filter.limit < 1 || filter.limit > kMaxListLimit) {
    return Invalid(absl::StrCat("limit must be in 1..", kMaxListLimit));
  }
  std::string sql =
      "SELECT m.evaluation_id, v.candidate_id, r.url, m.metric, m.unit, "
      "m.direction, m.is_primary, m.baseline, m.candidate, m.speedup, "
      "m.ci_low, m.ci_high, m.n_pairs, m.p_value, m.significant, "
      "m.flagged_for_review, m.decided_at_us, m.proto FROM "
      "metric_comparisons m JOIN "
      "verdicts v ON v.evaluation_id = m.evaluation_id JOIN evaluations e ON "
      "e.id = m.evaluation_id JOIN repos r ON r.id = e.repo_id WHERE 1 = 1";
  std::vector<SqlValue> args;
  auto arg = [&](SqlValue v) {
    args.push_back(std::move(v));
    return absl::StrCat("$", args.size());
  };
  if (!filter.metric.empty())
    absl::StrAppend(&sql, " AND m.metric = ", arg(filter.metric));
  if (!filter.evaluation_id.empty()) {
    absl::StrAppend(&sql,
                    " AND m.evaluation_id = ", arg(filter.evaluation_id));
  }
  if (!filter.repo.empty())
    absl::StrAppend(&sql, " AND r.url = ", arg(filter.repo));
  if (filter.since != absl::InfinitePast()) {
    absl::StrAppend(&sql, " AND m.decided_at_us >= ",
                    arg(absl::ToUnixMicros(filter.since)));
  }
  absl::StrAppend(
      &sql, " ORDER BY m.decided_at_us, m.evaluation_id, m.metric LIMIT ",
      arg(filter.limit));
  std::vector<MetricComparisonRecord> out;
  DG_RETURN_IF_ERROR(Run(
      "ListMetricComparisons", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
        for (const SqlRow& row : r.rows) {
          MetricComparisonRecord rec;
          rec.evaluation_id = row.Text(0);
          rec.candidate_id = row.Text(1);
          rec.repo = row.Text(2);
          // The stored message carries every field; the columns are for
          // queries.
          DG_ASSIGN_OR_RETURN(rec.comparison,
                              Parse<v1::MetricComparison>(
                                  row.Bytes(17), "metric comparison"));
          rec.decided_at = FromUs(row.Int(16));
          out.push_back(std::move(rec));
        }
        return absl::OkStatus();
      }));
  return out;
}

}  // namespace densegate::results::internal::sql_store_impl
