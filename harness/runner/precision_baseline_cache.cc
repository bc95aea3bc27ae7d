#include "harness/runner/precision_baseline_cache.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace densegate::harness {

int64_t PrecisionBaseline::Bytes() const {
  int64_t n = static_cast<int64_t>(reference.size() * sizeof(double));
  for (const std::vector<float>& v : inputs) n += static_cast<int64_t>(v.size() * sizeof(float));
  return n;
}

std::string PrecisionBaselineKey(const std::string& runner_digest,
                                 const v1::PrecisionSuite& suite) {
  // Sorted: a protobuf map's iteration order is unspecified.
  const std::map<std::string, double> params(suite.params().begin(), suite.params().end());
  const std::map<std::string, int64_t> shape(suite.shape().begin(), suite.shape().end());
  std::string key =
      absl::StrCat(runner_digest, "|", suite.op(), "|", absl::StrJoin(suite.lengths(), ","), "|");
  for (const auto& [name, value] : shape) absl::StrAppendFormat(&key, "%s=%d;", name, value);
  key += "|";
  for (const auto& [name, value] : params) absl::StrAppendFormat(&key, "%s=%.17g;", name, value);
  return key;
}

std::shared_ptr<const PrecisionBaseline> PrecisionBaselineCache::Find(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void PrecisionBaselineCache::Insert(const std::string& key,
                                    std::shared_ptr<const PrecisionBaseline> baseline) {
  const int64_t size = baseline->Bytes();
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (size > capacity_bytes_) return;
  while (bytes_ + size > capacity_bytes_) EraseLocked(std::prev(lru_.end()));
  lru_.emplace_front(key, std::move(baseline));
  index_[key] = lru_.begin();
  bytes_ += size;
}

void PrecisionBaselineCache::EraseLocked(std::list<Entry>::iterator it) {
  bytes_ -= it->second->Bytes();
  index_.erase(it->first);
  lru_.erase(it);
}

int64_t PrecisionBaselineCache::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

int PrecisionBaselineCache::entries() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(lru_.size());
}

}  // namespace densegate::harness
