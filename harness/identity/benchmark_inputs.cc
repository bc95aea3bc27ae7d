#include "harness/identity/benchmark_inputs.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include <openssl/evp.h>

#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "manifest/manifest.h"

namespace densegate::harness {
namespace {

namespace fs = std::filesystem;

// Guards against symbolic-link loops and trees no benchmark reads.
constexpr int kMaxDepth = 32;  // Below Linux's 40 links per path lookup.
constexpr int64_t kMaxFiles = 200000;

// Regular files under `root` (a file or a directory, links followed), keyed
// by their path relative to the checkout. A missing root adds nothing.
absl::Status AddFiles(const std::string& checkout, const std::string& root,
                      std::map<std::string, fs::path>* files) {
  std::error_code ec;
  const fs::path path = fs::path(checkout) / root;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return absl::OkStatus();
  if (fs::is_regular_file(status)) {
    (*files)[root] = path;
    return absl::OkStatus();
  }
  if (!fs::is_directory(status)) return absl::OkStatus();
  fs::recursive_directory_iterator it(path, fs::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() > kMaxDepth || files->size() > static_cast<size_t>(kMaxFiles)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: more than %d levels or %d files (a symbolic-link loop?)", root,
                          kMaxDepth, kMaxFiles));
    }
    if (!it->is_regular_file(ec)) continue;
    (*files)[(fs::path(root) / it->path().lexically_relative(path)).generic_string()] = it->path();
  }
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot walk %s: %s", path.string(), ec.message()));
  }
  return absl::OkStatus();
}

// True when the two files hold the same bytes; adds the bytes read.
absl::StatusOr<bool> SameContents(const fs::path& a, const fs::path& b, int64_t* bytes) {
  std::error_code ec_a, ec_b;
  const uintmax_t size_a = fs::file_size(a, ec_a), size_b = fs::file_size(b, ec_b);
  if (ec_a || ec_b) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot stat %s or %s", a.string(), b.string()));
  }
  if (size_a != size_b) return false;
  std::ifstream in_a(a, std::ios::binary), in_b(b, std::ios::binary);
  if (!in_a || !in_b) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot read %s or %s", a.string(), b.string()));
  }
  std::vector<char> buf_a(1 << 16), buf_b(1 << 16);
  while (in_a && in_b) {
    in_a.read(buf_a.data(), buf_a.size());
    in_b.read(buf_b.data(), buf_b.size());
    if (in_a.gcount() != in_b.gcount()) return false;
    if (!std::equal(buf_a.begin(), buf_a.begin() + in_a.gcount(), buf_b.begin())) return false;
    *bytes += in_a.gcount();
  }
  return true;
}

// The executable must be a regular file (built); then every input under it,
// its runfiles tree (less the MANIFEST) and the declared reads.
absl::StatusOr<std::map<std::string, fs::path>> ListInputs(const v1::BenchmarkSpec& benchmark,
                                                           const std::string& checkout,
                                                           const char* arm) {
  const std::string executable = BenchmarkExecutable(benchmark);
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(checkout) / executable, ec)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is not a file in the %s checkout", executable, arm));
  }
  const std::string runfiles = executable + ".runfiles";
  std::vector<std::string> roots = {executable, runfiles};
  roots.insert(roots.end(), benchmark.reads().begin(), benchmark.reads().end());
  std::map<std::string, fs::path> files;
  for (const std::string& root : roots) {
    if (absl::Status s = AddFiles(checkout, root, &files); !s.ok()) return s;
  }
  // Its lines map each runfile to an absolute path in its own checkout.
  files.erase(runfiles + "/MANIFEST");
  return files;
}

}  // namespace

absl::StatusOr<std::string> BenchmarkInputsDigest(const v1::BenchmarkSpec& benchmark,
                                                  const std::string& checkout_dir) {
  absl::StatusOr<std::map<std::string, fs::path>> files =
      ListInputs(benchmark, checkout_dir, "given");
  if (!files.ok()) return files.status();
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("cannot start a SHA-256 digest");
  }
  bool updated = true;
  auto update = [&](const void* data, size_t size) {
    updated &= EVP_DigestUpdate(ctx.get(), data, size) == 1;
  };
  // The manifest's entry first: the same programs run with other arguments
  // or metrics are another measurement (a later evaluation may read a newer
  // manifest).
  const std::string spec = benchmark.SerializeAsString();
  const std::string spec_header = absl::StrCat("spec ", spec.size(), "\n");
  update(spec_header.data(), spec_header.size());
  update(spec.data(), spec.size());
  std::vector<char> buf(1 << 16);
  for (const auto& [relative, path] : *files) {
    std::ifstream in(path, std::ios::binary);
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (!in || ec) {
      return absl::FailedPreconditionError(absl::StrFormat("cannot read %s", path.string()));
    }
    // Path and size first, so that no two file lists hash alike.
    const std::string header = absl::StrCat(relative, std::string(1, '\0'), size, "\n");
    update(header.data(), header.size());
    uintmax_t read = 0;
    while (in) {
      in.read(buf.data(), buf.size());
      update(buf.data(), in.gcount());
      read += in.gcount();
    }
    if (in.bad() || read != size) {
      return absl::FailedPreconditionError(
          absl::StrFormat("cannot read %s (%d of %d bytes)", path.string(), read, size));
    }
  }
  if (!updated) return absl::InternalError("SHA-256 digest update failed");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &length) != 1) {
    return absl::InternalError("cannot finish a SHA-256 digest");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), length));
}

absl::StatusOr<InputComparison> CompareBenchmarkInputs(const v1::BenchmarkSpec& benchmark,
                                                       const std::string& baseline_dir,
                                                       const std::string& candidate_dir) {
  absl::StatusOr<std::map<std::string, fs::path>> baseline_files =
      ListInputs(benchmark, baseline_dir, "baseline");
  if (!baseline_files.ok()) return baseline_files.status();
  absl::StatusOr<std::map<std::string, fs::path>> candidate_files =
      ListInputs(benchmark, candidate_dir, "candidate");
  if (!candidate_files.ok()) return candidate_files.status();
  const std::map<std::string, fs::path>& baseline = *baseline_files;
  const std::map<std::string, fs::path>& candidate = *candidate_files;

  InputComparison out;
  auto only_in = [&out](const std::string& path, const char* arm) {
    out.difference = absl::StrCat(path, ": only in the ", arm);
    return out;
  };
  auto b = baseline.begin();
  auto c = candidate.begin();
  for (; b != baseline.end() && c != candidate.end(); ++b, ++c) {
    if (b->first < c->first) return only_in(b->first, "baseline");
    if (c->first < b->first) return only_in(c->first, "candidate");
    absl::StatusOr<bool> same = SameContents(b->second, c->second, &out.bytes);
    if (!same.ok()) return same.status();
    ++out.files;
    if (!*same) {
      out.difference = absl::StrCat(b->first, ": contents differ");
      return out;
    }
  }
  if (b != baseline.end()) return only_in(b->first, "baseline");
  if (c != candidate.end()) return only_in(c->first, "candidate");
  out.identical = true;
  return out;
}

}  // namespace densegate::harness
