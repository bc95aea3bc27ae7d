// A kernel runner that cheats, for the red-team tests of the runner
// protocol. It speaks the protocol like kernels/runner/kernel_runner and
// computes with the same ops, then applies the trick named in the file
// `trick` of its working directory (each trick is a way a candidate could
// try to look fast or correct):
//   none              honest
//   cache_by_pointer  returns the first call's outputs whenever the buffers
//                     are at the same addresses
//   cache_by_content  remembers outputs keyed by a sample of the inputs and
//                     skips the work on a hit
//   skip_compute      leaves the output buffers as they are
//   strided           writes only every other output value
//   skip_tail         leaves the last (count % 64) outputs unwritten
//   write_inputs      scribbles over its first input after computing
//   tf32              computes KDA with TF32 dot products (declared ieee)
//   nondeterministic  perturbs one output bit at random
//   background        keeps a thread busy for 300 ms after each call
//   late_sloppy       honest for 4 calls, then computes half the output
//   crash             aborts on its first run
//   hang              never answers a run
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/kda/kda_decode.h"
#include "kernels/runner/runner_ops.h"
#include "nlohmann/json.hpp"

namespace {

using densegate::kernels::runner::BufferSpec;
using densegate::kernels::runner::Role;
using nlohmann::json;

int64_t Align64(int64_t x) { return (x + 63) / 64 * 64; }

std::string Trick() {
  std::ifstream in("trick");
  std::string t;
  in >> t;
  return t.empty() ? "none" : t;
}

// KDA decode with TF32 operands: what a candidate that "forgot" the declared
// precision computes.
void Tf32Decode(const json& shape, const std::vector<float*>& b) {
  namespace kda = densegate::kernels::kda;
  // A precision sweep's shape.tokens is one sequence of that many steps.
  const bool sequence = shape.contains("tokens");
  kda::KdaDims dims{sequence ? 1 : shape["batch"].get<int>(), shape["heads"].get<int>(),
                    shape["k"].get<int>(), shape["v"].get<int>()};
  const int64_t steps = sequence ? shape["tokens"].get<int64_t>() : shape.value("steps", 1);
  const int64_t per = static_cast<int64_t>(dims.batch) * dims.heads;
  kda::KdaDecodeOptions o;
  o.math.precision = densegate::kernels::kda::Precision::kTf32;
  for (int64_t t = 0; t < steps; ++t) {
    kda::KdaInputs<float> in;
    in.q = b[0] + t * per * dims.k_dim;
    in.k = b[1] + t * per * dims.k_dim;
    in.v = b[2] + t * per * dims.v_dim;
    in.g = b[3] + t * per * dims.k_dim;
    in.beta = b[4] + t * per;
    (void)kda::KdaDecode(dims, in, b[5], b[6] + t * per * dims.v_dim, o);
  }
}

}  // namespace

int main() {
  const std::string trick = Trick();
  std::map<std::vector<float*>, std::vector<std::vector<float>>> by_pointer;
  std::map<std::vector<float>, std::vector<std::vector<float>>> by_content;
  std::mt19937 noise(std::random_device{}());
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  char* base = nullptr;
  int64_t size = 0;
  int calls = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    json req = json::parse(line, nullptr, false);
    const std::string op = req.value("op", "");
    const json shape = req.value("shape", json::object());
    const json params = req.value("params", json::object());
    auto specs = densegate::kernels::runner::DescribeOp(op, shape, params);
    if (!specs.ok()) {
      std::cout << json{{"ok", false}, {"error", std::string(specs.status().message())}}.dump()
                << "\n" << std::flush;
      continue;
    }
    if (req.value("cmd", "") == "describe") {
      json buffers = json::array();
      for (const BufferSpec& s : *specs) {
        const char* role = s.role == Role::kInput ? "input" : s.role == Role::kInOut ? "inout" : "output";
        buffers.push_back({{"name", s.name}, {"role", role}, {"count", s.count}, {"init", s.init}});
      }
      std::cout << json{{"ok", true}, {"buffers", buffers}}.dump() << "\n" << std::flush;
      continue;
    }
    const bool reference = req.value("mode", "") == "reference";
    if (!reference && trick == "crash") std::abort();
    if (!reference && trick == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
    struct stat st;
    fstat(3, &st);
    if (st.st_size != size) {
      if (base) munmap(base, size);
      base = static_cast<char*>(mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0));
      size = st.st_size;
    }
    std::vector<float*> buffers;
    std::vector<double*> results;
    std::vector<int64_t> counts;
    int64_t end = 0;
    for (const BufferSpec& s : *specs) {
      buffers.push_back(reinterpret_cast<float*>(base + end));
      counts.push_back(s.count);
      end = Align64(end + s.count * 4);
    }
    for (const BufferSpec& s : *specs) {
      if (s.role == Role::kInput) continue;
      results.push_back(reinterpret_cast<double*>(base + end));
      end = Align64(end + s.count * 8);
    }
    ++calls;
    auto outputs = [&] {
      std::vector<std::vector<float>> o;
      for (size_t i = 0; i < specs->size(); ++i) {
        if ((*specs)[i].role != Role::kInput) o.emplace_back(buffers[i], buffers[i] + counts[i]);
      }
      return o;
    };
    auto restore = [&](const std::vector<std::vector<float>>& o) {
      size_t r = 0;
      for (size_t i = 0; i < specs->size(); ++i) {
        if ((*specs)[i].role != Role::kInput) std::copy(o[r].begin(), o[r].end(), buffers[i]), ++r;
      }
    };
    std::vector<float> key;
    for (int64_t j = 0; j < std::min<int64_t>(16, counts[0]); ++j) key.push_back(buffers[0][j]);
    bool done = false;
    if (!reference && trick == "cache_by_pointer" && by_pointer.count(buffers)) {
      restore(by_pointer[buffers]);
      done = true;
    }
    if (!reference && trick == "cache_by_content" && by_content.count(key)) {
      restore(by_content[key]);
      done = true;
    }
    if (!reference && trick == "skip_compute") done = true;
    if (!done) {
      std::vector<std::vector<float>> saved;
      const bool partial = !reference && (trick == "strided" || trick == "skip_tail" ||
                                          (trick == "late_sloppy" && calls > 4));
      if (partial) saved = outputs();  // The poison, to put partly back.
      if (!reference && trick == "tf32" && op == "kda_decode") {
        Tf32Decode(shape, buffers);
      } else {
        (void)densegate::kernels::runner::RunOp(op, shape, params, reference, buffers, results);
      }
      if (partial) {
        size_t r = 0;
        for (size_t i = 0; i < specs->size(); ++i) {
          if ((*specs)[i].role != Role::kOutput) {
            r += (*specs)[i].role == Role::kInOut;
            continue;
          }
          const int64_t n = counts[i];
          for (int64_t j = 0; j < n; ++j) {
            const bool skip = trick == "strided"     ? j % 2 == 1
                              : trick == "skip_tail" ? j >= n / 64 * 64
                                                     : j >= n / 2;
            if (skip) buffers[i][j] = saved[r][j];
          }
          ++r;
        }
      }
      if (!reference && trick == "cache_by_pointer") by_pointer[buffers] = outputs();
      if (!reference && trick == "cache_by_content") by_content[key] = outputs();
    }
    if (!reference && trick == "write_inputs") buffers[0][0] += 1.0f;
    if (!reference && trick == "nondeterministic") {
      for (size_t i = 0; i < specs->size(); ++i) {
        if ((*specs)[i].role == Role::kOutput) {
          uint32_t bits;
          float* p = &buffers[i][noise() % counts[i]];
          std::memcpy(&bits, p, 4);
          bits ^= 1;
          std::memcpy(p, &bits, 4);
        }
      }
    }
    std::cout << json{{"ok", true}}.dump() << "\n" << std::flush;
    if (!reference && trick == "background") {
      threads.emplace_back([&stop] {
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        volatile double x = 0;
        while (!stop && std::chrono::steady_clock::now() < until) x = x + 1;
      });
    }
  }
  stop = true;
  for (auto& t : threads) t.join();
  return 0;
}
