#include "results/store/internal/sql_statements.h"

#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace densegate::results::internal::sql_store_impl {

std::string EndJobAndEvaluation(absl::string_view now) {
  return absl::StrCat(
      " j AS (UPDATE jobs SET state = 3, updated_at_us = ", now,
      " FROM l WHERE jobs.id = l.job_id RETURNING jobs.id),"
      " e AS (UPDATE evaluations SET state = 3, updated_at_us = ",
      now,
      " FROM l WHERE evaluations.id = l.evaluation_id"
      " RETURNING evaluations.id, evaluations.candidate_id),");
}

const std::string& PgFinish() {
  static const std::string* text = new std::string(absl::StrCat(
      "WITH l AS ("
      " UPDATE leases SET state = 2, ended_at_us = $3,"
      " end_reason = 'finished'"
      " WHERE id = $1 AND node_id = $2 AND state = 1 AND expires_at_us > $3"
      " AND job_kind = 1"
      " AND ($4 = '' OR evaluation_id = $4)"
      " AND ($5 = '' OR $5 = (SELECT candidate_id FROM evaluations"
      " WHERE evaluations.id = leases.evaluation_id))"
      " AND NOT EXISTS (SELECT 1 FROM unnest(CAST($6 AS BIGINT[])) AS s(id)"
      " WHERE NOT EXISTS (SELECT 1 FROM samples WHERE samples.id = s.id"
      " AND samples.evaluation_id = leases.evaluation_id))"
      " RETURNING id, job_id, evaluation_id),",
      EndJobAndEvaluation("$3"), " v AS (", kVerdictInsert,
      " SELECT e.id, e.candidate_id, l.id, CAST($7 AS INTEGER),"
      " CAST($8 AS INTEGER), CAST($9 AS TEXT), CAST($10 AS TEXT),"
      " CAST($11 AS TEXT), CAST($12 AS TEXT), CAST($13 AS BIGINT),"
      " CAST($14 AS BIGINT), CAST($15 AS BYTEA) FROM e, l),"
      " vs AS (INSERT INTO verdict_samples (evaluation_id, sample_id)"
      " SELECT l.evaluation_id, s.id FROM l,"
      " unnest(CAST($6 AS BIGINT[])) AS s(id)),"
      " mc AS (",
      kComparisonInsert, ", CAST($14 AS BIGINT), m.proto FROM l, unnest(",
      PgComparisonArrays::Casts(16), ") AS m(", PgComparisonArrays::kNames,
      "))", kPgFinishCount));
  return *text;
}

const std::string& PgFinishAndClaim() {
  static const std::string* text = new std::string(absl::StrCat(
      absl::StripSuffix(PgFinish(), kPgFinishCount), kPgClaimAfterFinish));
  return *text;
}

const std::string& PgFinishAndClaimBatch(size_t n) {
  static const std::vector<std::string>* texts = [] {
    const std::string finish = absl::StrCat(
        EndJobAndEvaluation("$1"), " v AS (", kVerdictInsert,
        " SELECT e.id, e.candidate_id, l.id, i.decision, i.policy,"
        " i.manifest_hash, i.provenance_node_id, i.node_fingerprint,"
        " i.software_version, i.statistics_seed, i.decided_at_us, i.proto"
        " FROM l JOIN e ON e.id = l.evaluation_id JOIN i ON i.item = l.item),"
        " vs AS (INSERT INTO verdict_samples (evaluation_id, sample_id)"
        " SELECT l.evaluation_id, s.id FROM l JOIN s ON s.item = l.item),"
        " mc AS (",
        kComparisonInsert,
        ", i.decided_at_us, m.proto FROM l JOIN i ON i.item = l.item JOIN"
        " unnest(CAST($18 AS INTEGER[]), ",
        PgComparisonArrays::Casts(19), ") AS m(item, ",
        PgComparisonArrays::kNames, ") ON m.item = l.item),");
    auto* v = new std::vector<std::string>;
    for (int i = 0; i <= kMaxFinishBatch; ++i) {
      v->push_back(absl::StrReplaceAll(
          kPgFinishAndClaimBatch,
          {{"@LIMIT@", absl::StrCat(i)}, {"@FINISH@", finish}}));
    }
    return v;
  }();
  return texts->at(n);
}

SqlValue PgArray(const std::vector<int64_t>& v) {
  return SqlValue(absl::StrCat("{", absl::StrJoin(v, ","), "}"));
}

SqlValue PgArray(const std::vector<double>& v) {
  std::vector<std::string> parts;
  for (double d : v) parts.push_back(DoubleToSqlText(d));
  return SqlValue(absl::StrCat("{", absl::StrJoin(parts, ","), "}"));
}

SqlValue PgArray(const std::vector<std::string>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.push_back('"');
    for (char c : v[i]) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(c);
    }
    out.push_back('"');
  }
  out.push_back('}');
  return SqlValue(std::move(out));
}

std::string PgClaim(int limit) {
  return absl::StrReplaceAll(kPgClaim, {{"@LIMIT@", absl::StrCat(limit)}});
}

std::vector<SqlValue> PgClaimArgs(const std::string& node_id,
                                         const v1::NodeDimensions& d,
                                         int64_t now, int64_t expires) {
  return {d.accelerator_kind(),
          d.accelerator_count(),
          d.accelerator_memory_bytes(),
          d.fingerprint(),
          node_id,
          now,
          expires};
}

}  // namespace densegate::results::internal::sql_store_impl
