// Feedback bundles in transit and on disk: the checks every holder of one
// applies (a node reading the directory its evaluation wrote, the store,
// a client writing one out), its pieces on the wire, and the directory
// form. What the files say is docs/feedback.md; harness/feedback.h writes
// them.
//
// A bundle's paths come from the node, and a node may run a hostile
// candidate's build: whoever writes a bundle to disk checks every path
// (relative, no "." or ".." component, no backslash or NUL) and writes
// regular files only, so a bundle can never name a file outside its
// directory.
//
// Thread-safety: free functions.
#ifndef DENSEGATE_RESULTS_FEEDBACK_BUNDLE_H_
#define DENSEGATE_RESULTS_FEEDBACK_BUNDLE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/densegate.pb.h"

namespace densegate::results {

// feedback.json's "schema_version" (docs/feedback.md): a reader that knows
// an older version reads the fields it knows; a field changes meaning only
// with a new version.
inline constexpr int kFeedbackSchemaVersion = 1;

// The file that holds the summary, at the bundle's root.
inline constexpr char kFeedbackSummaryFile[] = "feedback.json";

// The cap on a bundle's bytes when the scheduler names none.
inline constexpr int64_t kDefaultFeedbackMaxBytes = int64_t{32} << 20;

// Largest piece of a file in one message, well under gRPC's 4 MiB.
inline constexpr int64_t kFeedbackPieceBytes = int64_t{1} << 20;

// Most files a bundle holds, and most paths its omitted list names.
inline constexpr int kMaxBundleFiles = 10000;

// Each file's path counts this much toward the cap besides its bytes, so
// that many empty files cannot hold more memory than the cap says.
inline constexpr int64_t kFeedbackFileOverheadBytes = 64;

// InvalidArgument unless `path` is a relative '/'-separated path of
// non-empty components, none "." or "..", valid UTF-8 without control
// characters or backslash, at most 512 bytes.
absl::Status CheckBundlePath(absl::string_view path);

// Whether `text` is valid UTF-8 (protobuf strings must be).
bool IsValidUtf8(absl::string_view text);

// Every path (files and omitted) checked, each file named once, at most
// kMaxBundleFiles of each; ResourceExhausted when BundleCapBytes exceeds
// `max_bytes`.
absl::Status CheckBundle(const v1::FeedbackBundle& bundle, int64_t max_bytes);

// The files' bytes.
int64_t BundleBytes(const v1::FeedbackBundle& bundle);

// What the cap is measured in: the files' bytes, and
// kFeedbackFileOverheadBytes for each file.
int64_t BundleCapBytes(const v1::FeedbackBundle& bundle);

// The summary file's content, or "" when the bundle has none.
std::string BundleSummary(const v1::FeedbackBundle& bundle);

// Reads the regular files under `dir` (symlinks and other kinds, and paths
// CheckBundlePath refuses, are skipped; a file is read up to the size it
// was listed with) into a bundle. When they exceed `max_bytes` or
// kMaxBundleFiles, files are left out until the rest fit: traces/ first,
// then logs/, each largest first, then the other files, feedback.json
// last. What was left out is listed in omitted (the first
// kMaxBundleFiles).
absl::StatusOr<v1::FeedbackBundle> ReadBundleDir(const std::string& dir, int64_t max_bytes);

// Writes the bundle's files under `dir` (created), after CheckBundle. A
// file already there is replaced (unlinked, then created anew: a hard link
// keeps its content); a link where a directory of the bundle goes is
// refused.
absl::Status WriteBundleDir(const v1::FeedbackBundle& bundle, const std::string& dir);

// Calls `emit` with each file of `bundle` cut into pieces of at most
// kFeedbackPieceBytes (an empty file is one empty piece), in order. Stops
// at the first false `emit` returns; returns whether all were sent.
bool ForEachPiece(const v1::FeedbackBundle& bundle,
                  const std::function<bool(const v1::FeedbackFile&)>& emit);

// Collects pieces back into files: a piece whose path is the last file's
// continues it. ResourceExhausted once BundleCapBytes would exceed
// `max_bytes` or the files kMaxBundleFiles; InvalidArgument for a path
// CheckBundlePath refuses.
class BundleAssembler {
 public:
  explicit BundleAssembler(int64_t max_bytes) : max_bytes_(max_bytes) {}
  absl::Status Add(const v1::FeedbackFile& piece);
  // The files' bytes so far.
  int64_t bytes() const { return bytes_; }
  v1::FeedbackBundle& bundle() { return bundle_; }

 private:
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  int64_t cap_bytes_ = 0;
  v1::FeedbackBundle bundle_;
};

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_FEEDBACK_BUNDLE_H_
