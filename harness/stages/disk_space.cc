// Disk space: each arm's usage, and a candidate that fills the disk.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::Status Evaluation::CheckDiskSpace(bool after_failure) const {
  struct statvfs fs;
  if (statvfs(options_.workspace_root.c_str(), &fs) != 0) return absl::OkStatus();
  const double free_bytes = static_cast<double>(fs.f_bavail) * fs.f_frsize;
  std::string evidence;
  if (free_bytes < options_.min_free_bytes) {
    evidence = absl::StrFormat("%.1f MiB free, at least %.1f MiB needed", free_bytes / (1 << 20),
                               options_.min_free_bytes / double(1 << 20));
  } else if (after_failure) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(log_dir_, ec)) {
      if (platform::ReadOutputFile(entry.path().string()).find("No space left on device") !=
          std::string::npos) {
        evidence = absl::StrFormat("%s reports \"No space left on device\"",
                                   entry.path().filename().string());
        break;
      }
    }
  }
  if (evidence.empty()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the workspace filesystem under %s is full (%s); the candidate is not at fault: free "
      "space on this node and evaluate again",
      options_.workspace_root, evidence));
}

// nftw's callback takes no state: the walk in progress on this thread.
thread_local std::set<std::pair<dev_t, ino_t>>* walk_seen = nullptr;
thread_local int64_t walk_bytes = 0;

int64_t Evaluation::DiskUsage(const std::vector<std::string>& dirs) {
  std::set<std::pair<dev_t, ino_t>> seen;
  walk_seen = &seen;
  walk_bytes = 0;
  // Physical walk (links not followed). An entry that vanished or cannot be
  // read is skipped and the walk goes on: a build creates and deletes files
  // all the time, and a walk that stopped at the first would undercount.
  auto add = [](const char*, const struct stat* st, int type, struct FTW*) {
    if (type != FTW_NS && type != FTW_SL && walk_seen->emplace(st->st_dev, st->st_ino).second) {
      walk_bytes += int64_t{st->st_blocks} * 512;
    }
    return 0;
  };
  for (const std::string& dir : dirs) nftw(dir.c_str(), add, 32, FTW_PHYS);
  walk_seen = nullptr;
  return walk_bytes;
}

std::vector<std::string> Evaluation::ArmDirs(bool candidate) const {
  const ArmArea& area = candidate ? checkout_.candidate : checkout_.baseline;
  return {candidate ? checkout_.candidate_dir : checkout_.baseline_dir, area.home, area.cache};
}

std::string Evaluation::CandidateDiskBlame(bool disk_low) {
  const int64_t mine = DiskUsage(ArmDirs(true));
  const double mib = 1 << 20;
  if (mine > options_.arm_disk_quota_bytes) {
    return absl::StrFormat("the candidate's arm holds %.1f MiB, over its %.1f MiB disk quota",
                           mine / mib, options_.arm_disk_quota_bytes / mib);
  }
  if (!disk_low) return "";
  // Blamed when what it holds beyond the baseline's arm would restore the
  // reserve, not for a few blocks more while another slot filled the disk.
  const int64_t theirs = DiskUsage(ArmDirs(false));
  if (mine - theirs < options_.min_free_bytes) return "";
  return absl::StrFormat(
      "the workspace's filesystem is below the %.1f MiB the node keeps free, and the "
      "candidate's arm holds %.1f MiB, more than the baseline's %.1f MiB: the candidate filled "
      "the disk",
      options_.min_free_bytes / mib, mine / mib, theirs / mib);
}

bool Evaluation::DiskLow() const {
  struct statvfs fs;
  return statvfs(options_.workspace_root.c_str(), &fs) == 0 &&
         static_cast<double>(fs.f_bavail) * fs.f_frsize < options_.min_free_bytes;
}

std::function<std::string()> Evaluation::CandidateDiskWatch() {
  // Free space is cheap to read every time; walking the arm costs about a
  // millisecond per thousand files, so it runs at most 2% of the time, 10%
  // while the disk is low.
  auto next_walk = std::make_shared<absl::Time>(absl::InfinitePast());
  return [this, next_walk]() -> std::string {
    const bool low = DiskLow();
    if (absl::Now() < *next_walk) return "";
    const absl::Time start = absl::Now();
    std::string blame = CandidateDiskBlame(low);
    *next_walk = absl::Now() + std::max(absl::Milliseconds(500),
                                        (low ? 10 : 50) * (absl::Now() - start));
    if (!blame.empty()) candidate_filled_disk_ = true;
    return blame;
  };
}

}  // namespace densegate::harness::internal
