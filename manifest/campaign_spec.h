// The campaign file: what `densegate agent run CAMPAIGN.json` reads and the
// scheduler keeps (v1::Campaign in densegate.proto, in protobuf's JSON
// form). Read and checked like the manifest: every problem is reported with
// its field path ("proposers[1].knob_search.space: required").
//
// Thread-safety: pure functions.
#ifndef DENSEGATE_MANIFEST_CAMPAIGN_SPEC_H_
#define DENSEGATE_MANIFEST_CAMPAIGN_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "manifest/json_message.h"
#include "proto/densegate.pb.h"

namespace densegate {

// Every problem of a campaign a person wrote (the fields the scheduler sets,
// owner, start_sha and created_at, are not checked here).
std::vector<FieldError> CampaignErrors(const v1::Campaign& campaign);

// InvalidArgument listing CampaignErrors, one per line; OK when none.
absl::Status ValidateCampaign(const v1::Campaign& campaign);

// Parses and validates a campaign file's text.
absl::StatusOr<v1::Campaign> ParseCampaign(absl::string_view json);

}  // namespace densegate

#endif  // DENSEGATE_MANIFEST_CAMPAIGN_SPEC_H_
