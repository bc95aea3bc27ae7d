#include "results/feedback/bundle.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>
#include <tuple>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace densegate::results {
namespace fs = std::filesystem;
namespace {

// Up to `size` bytes of the regular file at `path`, never through a link.
absl::StatusOr<std::string> ReadPrefix(const fs::path& path, int64_t size) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::string out(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = read(fd, out.data() + done, out.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  out.resize(done);
  return out;
}

// Writes `content` as a new file at `path`: whatever was there (a file, a
// link, a hard link's name) is unlinked first, and the file is created
// exclusively.
absl::Status WriteNew(const fs::path& path, const std::string& content) {
  (void)unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path.string()));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == content.size() && close(fd) == 0;
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

// Creates the directories of `relative` under `dir`, refusing to pass
// through a link.
absl::Status MakeParents(const fs::path& dir, const fs::path& relative) {
  fs::path at = dir;
  for (const fs::path& part : relative.parent_path()) {
    at /= part;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(at, ec);
    if (fs::is_symlink(st)) {
      return absl::FailedPreconditionError(
          absl::StrCat(at.string(), " is a link; a bundle is not written through one"));
    }
    if (!fs::exists(st)) fs::create_directory(at, ec);
    if (ec || !fs::is_directory(fs::symlink_status(at, ec))) {
      return absl::InternalError(absl::StrCat("cannot create the directory ", at.string()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int extra = 0;
    uint32_t code = 0;
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;  // Cut short.
    for (int k = 1; k <= extra; ++k) {
      const unsigned char next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

absl::Status CheckBundlePath(absl::string_view path) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("feedback bundle path \"",
                                                   absl::CHexEscape(path.substr(0, 200)), "\" ",
                                                   why));
  };
  if (path.empty()) return bad("is empty");
  if (path.size() > 512) return bad("is longer than 512 bytes");
  if (path.front() == '/') return bad("is absolute");
  if (!IsValidUtf8(path)) return bad("is not UTF-8");
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') {
      return bad("holds a control character or a backslash");
    }
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return bad("has an empty, \".\" or \"..\" component");
    }
  }
  return absl::OkStatus();
}

int64_t BundleBytes(const v1::FeedbackBundle& bundle) {
  int64_t bytes = 0;
  for (const v1::FeedbackFile& f : bundle.files()) bytes += static_cast<int64_t>(f.content().size());
  return bytes;
}

int64_t BundleCapBytes(const v1::FeedbackBundle& bundle) {
  return BundleBytes(bundle) + kFeedbackFileOverheadBytes * bundle.files_size();
}

absl::Status CheckBundle(const v1::FeedbackBundle& bundle, int64_t max_bytes) {
  if (bundle.files_size() > kMaxBundleFiles || bundle.omitted_size() > kMaxBundleFiles) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a feedback bundle holds and omits at most ", kMaxBundleFiles, " files each"));
  }
  std::set<absl::string_view> seen;
  for (const v1::FeedbackFile& f : bundle.files()) {
    if (absl::Status s = CheckBundlePath(f.path()); !s.ok()) return s;
    if (!seen.insert(f.path()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("feedback bundle names \"", f.path(), "\" twice"));
    }
  }
  for (const std::string& path : bundle.omitted()) {
    if (absl::Status s = CheckBundlePath(path); !s.ok()) return s;
  }
  if (const int64_t bytes = BundleCapBytes(bundle); bytes > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "feedback bundle counts ", bytes, " bytes, over the cap of ", max_bytes));
  }
  return absl::OkStatus();
}

std::string BundleSummary(const v1::FeedbackBundle& bundle) {
  for (const v1::FeedbackFile& f : bundle.files()) {
    if (f.path() == kFeedbackSummaryFile) return f.content();
  }
  return "";
}

absl::StatusOr<v1::FeedbackBundle> ReadBundleDir(const std::string& dir, int64_t max_bytes) {
  struct Entry {
    int rank;  // Left out first: 0 traces/, 1 logs/, 2 the rest, 3 the summary.
    int64_t size;
    std::string path;
  };
  std::vector<Entry> entries;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", dir, ": ", ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) return absl::InternalError(absl::StrCat("cannot read ", dir, ": ", ec.message()));
    if (it->is_symlink(ec) || !it->is_regular_file(ec)) continue;
    const uintmax_t size = it->file_size(ec);
    if (ec) continue;  // Gone since it was listed.
    const std::string path = fs::relative(it->path(), dir, ec).generic_string();
    if (ec || !CheckBundlePath(path).ok()) continue;
    const int rank = path == kFeedbackSummaryFile         ? 3
                     : absl::StartsWith(path, "traces/") ? 0
                     : absl::StartsWith(path, "logs/")   ? 1
                                                         : 2;
    entries.push_back({rank, static_cast<int64_t>(size), path});
  }
  // Leave out (rank, largest first) until the rest fit.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.rank, b.size, a.path) < std::tie(b.rank, a.size, b.path);
  });
  int64_t total = 0;
  for (const Entry& e : entries) total += e.size + kFeedbackFileOverheadBytes;
  size_t left = entries.size();
  v1::FeedbackBundle bundle;
  std::vector<const Entry*> kept;
  for (const Entry& e : entries) {
    if (total > max_bytes || left > static_cast<size_t>(kMaxBundleFiles)) {
      total -= e.size + kFeedbackFileOverheadBytes;
      --left;
      if (bundle.omitted_size() < kMaxBundleFiles) bundle.add_omitted(e.path);
    } else {
      kept.push_back(&e);
    }
  }
  std::sort(kept.begin(), kept.end(), [](const Entry* a, const Entry* b) { return a->path < b->path; });
  for (const Entry* e : kept) {
    absl::StatusOr<std::string> content = ReadPrefix(fs::path(dir) / e->path, e->size);
    if (!content.ok()) continue;  // Replaced by a link, or gone.
    v1::FeedbackFile* f = bundle.add_files();
    f->set_path(e->path);
    *f->mutable_content() = *std::move(content);
  }
  return bundle;
}

absl::Status WriteBundleDir(const v1::FeedbackBundle& bundle, const std::string& dir) {
  if (absl::Status s = CheckBundle(bundle, INT64_MAX); !s.ok()) return s;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  for (const v1::FeedbackFile& f : bundle.files()) {
    if (absl::Status s = MakeParents(dir, f.path()); !s.ok()) return s;
    if (absl::Status s = WriteNew(fs::path(dir) / f.path(), f.content()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool ForEachPiece(const v1::FeedbackBundle& bundle,
                  const std::function<bool(const v1::FeedbackFile&)>& emit) {
  v1::FeedbackFile piece;
  for (const v1::FeedbackFile& f : bundle.files()) {
    piece.set_path(f.path());
    const absl::string_view content = f.content();
    size_t at = 0;
    do {
      const size_t n = std::min<size_t>(kFeedbackPieceBytes, content.size() - at);
      piece.set_content(std::string(content.substr(at, n)));
      if (!emit(piece)) return false;
      at += n;
    } while (at < content.size());
  }
  return true;
}

absl::Status BundleAssembler::Add(const v1::FeedbackFile& piece) {
  const int n = bundle_.files_size();
  const bool continues = n > 0 && bundle_.files(n - 1).path() == piece.path();
  if (!continues) {
    if (absl::Status s = CheckBundlePath(piece.path()); !s.ok()) return s;
    if (n >= kMaxBundleFiles) {
      return absl::ResourceExhaustedError(
          absl::StrCat("a feedback bundle holds at most ", kMaxBundleFiles, " files"));
    }
    cap_bytes_ += kFeedbackFileOverheadBytes;
  }
  bytes_ += static_cast<int64_t>(piece.content().size());
  cap_bytes_ += static_cast<int64_t>(piece.content().size());
  if (cap_bytes_ > max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "feedback bundle exceeds the cap of ", max_bytes_, " bytes"));
  }
  if (continues) {
    bundle_.mutable_files(n - 1)->mutable_content()->append(piece.content());
  } else {
    *bundle_.add_files() = piece;
  }
  return absl::OkStatus();
}

}  // namespace densegate::results
