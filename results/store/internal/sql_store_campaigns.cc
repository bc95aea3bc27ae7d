// Campaigns: the spec of an agent's series of experiments. Its history is
// the evaluations whose candidate names it (ListEvaluations' campaign).
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

namespace {
// The spec as the caller gave it, without what the store sets.
std::string Spec(v1::Campaign c) {
  c.clear_created_at();
  return c.SerializeAsString();
}
}  // namespace

absl::StatusOr<v1::Campaign> SqlStore::PutCampaign(const v1::Campaign& campaign) {
  if (campaign.id().empty()) return Invalid("campaign id is empty");
  if (campaign.owner().empty()) return Invalid("campaign owner is empty: say who runs it");
  v1::Campaign out = campaign;
  if (!out.has_created_at()) *out.mutable_created_at() = ToProto(NowUs());
  DG_RETURN_IF_ERROR(Run("PutCampaign", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
    DG_ASSIGN_OR_RETURN(SqlResult r,
                        tx.Exec("SELECT proto FROM campaigns WHERE id = $1", {campaign.id()}));
    if (!r.rows.empty()) {
      v1::Campaign stored;
      if (!stored.ParseFromString(r.rows[0].Bytes(0))) {
        return absl::DataLossError("stored campaign " + campaign.id() + " does not parse");
      }
      if (Spec(stored) != Spec(campaign)) {
        return absl::AlreadyExistsError(absl::StrCat(
            "campaign ", campaign.id(), " exists with another spec (owner ", stored.owner(),
            "): resume it, or choose another id"));
      }
      out = stored;
      return absl::OkStatus();
    }
    return tx
        .Exec("INSERT INTO campaigns (id, owner, created_at_us, proto) VALUES ($1, $2, $3, $4)",
              {out.id(), out.owner(), FromProto(out.created_at()), Bytes{out.SerializeAsString()}})
        .status();
  }));
  return out;
}

absl::StatusOr<v1::Campaign> SqlStore::GetCampaign(absl::string_view id) {
  if (id.empty()) return Invalid("campaign id is empty");
  v1::Campaign out;
  DG_RETURN_IF_ERROR(Run("GetCampaign", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
    DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec("SELECT proto FROM campaigns WHERE id = $1", {id}));
    if (r.rows.empty()) return absl::NotFoundError(absl::StrCat("campaign ", id, " not found"));
    if (!out.ParseFromString(r.rows[0].Bytes(0))) {
      return absl::DataLossError(absl::StrCat("stored campaign ", id, " does not parse"));
    }
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace densegate::results::internal::sql_store_impl
