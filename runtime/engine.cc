#include "runtime/engine.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/decode_batch.h"
#include "runtime/pool_cache.h"
#include "runtime/sequence.h"
#include "runtime/status_macros.h"
#include "runtime/transfer_engine.h"
#include "runtime/work_queue.h"

namespace densegate::runtime {
namespace {

absl::Status CheckAtLeast(absl::string_view option, int value, int min) {
  if (value >= min) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "engine option %s must be >= %d, found %d", option, min, value));
}

absl::Status Cancelled() {
  return absl::CancelledError("engine is shutting down");
}

}  // namespace

absl::string_view EngineModeName(EngineMode mode) {
  return mode == EngineMode::kEpd ? "epd" : "colocated";
}

absl::StatusOr<EngineMode> ParseEngineMode(absl::string_view name) {
  if (name == "epd") return EngineMode::kEpd;
  if (name == "colocated") return EngineMode::kColocated;
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown engine mode \"%s\": expected epd or colocated", name));
}

absl::Status ValidateEngineOptions(const EngineOptions& o) {
  RT_RETURN_IF_ERROR(CheckAtLeast("max_batch_size", o.max_batch_size, 1));
  RT_RETURN_IF_ERROR(CheckAtLeast("kv_cache_tokens", o.kv_cache_tokens, 0));
  RT_RETURN_IF_ERROR(CheckAtLeast("kv_cache_kib", o.kv_cache_kib, 0));
  if (o.kv_cache_tokens > 0 && o.kv_cache_kib > 0) {
    return absl::InvalidArgumentError(
        "engine options kv_cache_tokens and kv_cache_kib both set: size the "
        "KV caches in tokens or in memory, not both");
  }
  if (o.mode == EngineMode::kEpd) {
    RT_RETURN_IF_ERROR(CheckAtLeast("encode_workers", o.encode_workers, 1));
    RT_RETURN_IF_ERROR(CheckAtLeast("prefill_workers", o.prefill_workers, 1));
    RT_RETURN_IF_ERROR(CheckAtLeast("transfer_workers", o.transfer_workers, 1));
    RT_RETURN_IF_ERROR(CheckAtLeast("decode_workers", o.decode_workers, 1));
    // Prefill chunks are whole multiples of the alignment.
    RT_RETURN_IF_ERROR(
        CheckAtLeast("token_budget", o.token_budget, kPrefillAlignment));
  } else {
    RT_RETURN_IF_ERROR(
        CheckAtLeast("colocated_workers", o.colocated_workers, 1));
    if (o.token_budget < o.max_batch_size + kPrefillAlignment) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "engine option token_budget (%d) must be >= max_batch_size (%d) + "
          "%d in colocated mode: a full decode batch plus one aligned "
          "prefill chunk",
          o.token_budget, o.max_batch_size, kPrefillAlignment));
    }
  }
  if (o.clock == nullptr) {
    return absl::InvalidArgumentError("engine option clock must be set");
  }
  return absl::OkStatus();
}

Engine::Engine(const HybridModel* model, const EngineOptions& options,
               RequestObserver* observer)
    : model_(model),
      options_(options),
      observer_(observer),
      telemetry_{options.clock, options.tracer, options.logger, &stats_},
      submit_queue_(std::make_unique<WorkQueue<std::unique_ptr<Sequence>>>()),
      prefill_queue_(std::make_unique<WorkQueue<std::unique_ptr<Sequence>>>()) {
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(
    const HybridModel* model, const EngineOptions& options,
    RequestObserver* observer) {
  RT_RETURN_IF_ERROR(ValidateEngineOptions(options));
  if (model == nullptr || observer == nullptr) {
    return absl::InvalidArgumentError("engine: model and observer must be set");
  }
  std::unique_ptr<Engine> engine(new Engine(model, options, observer));
  RT_RETURN_IF_ERROR(engine->Start());
  return engine;
}

absl::Status Engine::Start() {
  const ModelConfig& config = model_->config();
  const EngineOptions& o = options_;
  const bool epd = o.mode == EngineMode::kEpd;
  const int decode_workers = epd ? o.decode_workers : o.colocated_workers;
  auto capacity = [&](int requests) {
    if (o.kv_cache_tokens > 0) return o.kv_cache_tokens;
    return static_cast<int>(std::min<int64_t>(
        static_cast<int64_t>(requests) * config.max_context, 1 << 30));
  };
  PoolCacheOptions decode;
  decode.name = epd ? "decode" : "colocated";
  decode.kv_tokens = capacity(decode_workers * o.max_batch_size);
  // EPD: a batch's worth of transfers may land while the batch runs.
  // Colocated: each worker also holds the request it is prefilling.
  decode.state_slots = epd ? 2 * decode_workers * o.max_batch_size
                           : decode_workers * (o.max_batch_size + 1);
  decode.kv_bytes = int64_t{o.kv_cache_kib} << 10;
  decode.kv_format = o.kv_format;
  decode.kv_scale_dtype = o.kv_scale_dtype;
  RT_ASSIGN_OR_RETURN(
      decode_cache_,
      PoolCache::Create(config, decode, &kv_gauge_, &state_gauge_));

  if (epd) {
    PoolCacheOptions prefill = decode;
    prefill.name = "prefill";
    prefill.kv_tokens = capacity(2 * o.prefill_workers);
    // Each prefill worker's current request, plus finished prefills
    // waiting for their transfer.
    prefill.state_slots = 2 * o.prefill_workers + o.transfer_workers;
    RT_ASSIGN_OR_RETURN(
        prefill_cache_,
        PoolCache::Create(config, prefill, &kv_gauge_, &state_gauge_));
    transfer_ = std::make_unique<TransferEngine>(
        prefill_cache_.get(), decode_cache_.get(), o.transfer_workers,
        telemetry_, [this](std::unique_ptr<Sequence> s, absl::Status st) {
          Finish(std::move(s), std::move(st));
        });
    for (int i = 0; i < o.encode_workers; ++i) {
      encode_threads_.emplace_back(&Engine::EncodeWorker, this, i);
    }
    for (int i = 0; i < o.prefill_workers; ++i) {
      prefill_threads_.emplace_back(&Engine::PrefillWorker, this, i);
    }
    for (int i = 0; i < o.decode_workers; ++i) {
      decode_threads_.emplace_back(&Engine::DecodeWorker, this, i);
    }
  } else {
    for (int i = 0; i < o.colocated_workers; ++i) {
      decode_threads_.emplace_back(&Engine::ColocatedWorker, this, i);
    }
  }
  telemetry_.Log(LogLevel::kInfo, "engine_started",
                 {{"mode", EngineModeName(o.mode)},
                  {"kv_format", kernels::KvFormatName(o.kv_format)},
                  {"max_batch_size", o.max_batch_size},
                  {"token_budget", o.token_budget},
                  {"kv_cache_tokens", decode.kv_tokens},
                  {"kv_cache_kib", o.kv_cache_kib}});
  return absl::OkStatus();
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  stop_ = true;
  submit_queue_->Close();
  prefill_queue_->Close();
  // Wake workers waiting for cache space (the caches may be missing when
  // Start failed).
  for (PoolCache* cache : {prefill_cache_.get(), decode_cache_.get()}) {
    if (cache != nullptr) cache->Shutdown();
  }
  for (std::thread& t : encode_threads_) t.join();
  for (std::thread& t : prefill_threads_) t.join();
  if (transfer_ != nullptr) transfer_->Shutdown();
  for (std::thread& t : decode_threads_) t.join();
  encode_threads_.clear();
  prefill_threads_.clear();
  decode_threads_.clear();
  for (auto* queue : {submit_queue_.get(), prefill_queue_.get()}) {
    while (std::optional<std::unique_ptr<Sequence>> seq = queue->TryPop()) {
      Finish(std::move(*seq), Cancelled());
    }
  }
}

void Engine::Submit(Request request) {
  auto seq = std::make_unique<Sequence>();
  const int64_t now = telemetry_.clock->NowNanos();
  if (request.arrival_ns < 0) request.arrival_ns = now;
  seq->request = std::move(request);
  seq->queued_ns = now;
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  telemetry_.Log(LogLevel::kDebug, "request_submitted",
                 {{"request", seq->request.id},
                  {"prompt_tokens", seq->prompt_len()},
                  {"max_new_tokens", seq->request.max_new_tokens}});
  if (!submit_queue_->Push(seq)) Finish(std::move(seq), Cancelled());
}

void Engine::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int64_t* n) { return *n == 0; }, &in_flight_));
}

MemoryReport Engine::Memory() const {
  MemoryReport m;
  m.attention_kv_peak_bytes = kv_gauge_.peak();
  m.kda_state_peak_bytes = state_gauge_.peak();
  m.total_peak_bytes = total_gauge_.peak();
  m.in_use_bytes = total_gauge_.current();
  m.kv_block_bytes = decode_cache_->kv()->block_bytes();
  m.kv_bytes_per_token = decode_cache_->kv()->bytes_per_token();
  m.kda_state_bytes_per_request = decode_cache_->states()->slot_bytes();
  return m;
}

void Engine::Finish(std::unique_ptr<Sequence> seq, absl::Status status) {
  if (seq->residency.cache != nullptr) {
    status.Update(seq->residency.cache->Release(&seq->residency));
  }
  RequestResult result;
  result.id = seq->request.id;
  result.prompt_tokens = seq->prompt_len();
  result.tokens = std::move(seq->tokens);
  result.token_times_ns = std::move(seq->token_times_ns);
  result.arrival_ns = seq->request.arrival_ns;
  result.finish_ns = telemetry_.clock->NowNanos();
  if (status.ok()) {
    telemetry_.Log(
        LogLevel::kDebug, "request_finished",
        {{"request", result.id}, {"output_tokens", result.tokens.size()}});
  } else {
    telemetry_.Log(LogLevel::kWarning, "request_failed",
                   {{"request", result.id}, {"error", status.ToString()}});
  }
  result.status = std::move(status);
  observer_->OnFinished(std::move(result));
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

void Engine::NameThread(absl::string_view pool, int index) {
  if (telemetry_.tracer != nullptr) {
    telemetry_.tracer->NameThread(absl::StrCat(pool, "-", index));
  }
}

bool Engine::Encode(std::unique_ptr<Sequence>& seq) {
  const int64_t now = telemetry_.clock->NowNanos();
  stats_.queue_ns.fetch_add(now - seq->queued_ns);
  absl::Status status;
  {
    ScopedSpan span(telemetry_.tracer, telemetry_.clock, "encode", "stage",
                    &stats_.encode_ns, {{"request", seq->request.id}});
    status = ValidateRequest(seq->request, model_->config());
    if (status.ok()) {
      seq->embeddings.resize(static_cast<size_t>(seq->prompt_len()) *
                             model_->config().hidden_size);
      status = model_->Embed(seq->request.prompt, seq->embeddings.data());
    }
  }
  if (!status.ok()) {
    Finish(std::move(seq), status);
    return false;
  }
  return true;
}

absl::Status Engine::PrefillChunk(Sequence* seq, int budget,
                                  ForwardContext* ctx) {
  const int aligned = budget / kPrefillAlignment * kPrefillAlignment;
  const int start = seq->prefilled;
  const int n = std::min(seq->prompt_len() - start, aligned);
  const bool last = start + n == seq->prompt_len();
  std::vector<float> logits(last ? model_->config().vocab_size : 0);
  {
    ScopedSpan span(
        telemetry_.tracer, telemetry_.clock, "prefill", "stage",
        &stats_.prefill_ns,
        {{"request", seq->request.id}, {"start", start}, {"tokens", n}});
    RT_RETURN_IF_ERROR(model_->Prefill(
        seq->residency.cache->Ref(seq->residency), start, n,
        seq->embeddings.data() +
            static_cast<size_t>(start) * model_->config().hidden_size,
        last ? logits.data() : nullptr, ctx));
  }
  stats_.prefill_chunks.fetch_add(1);
  stats_.prefill_tokens.fetch_add(n);
  seq->prefilled += n;
  if (!last) return absl::OkStatus();
  RT_ASSIGN_OR_RETURN(int32_t token, GreedySample(logits));
  seq->tokens.push_back(token);
  seq->token_times_ns.push_back(telemetry_.clock->NowNanos());
  std::vector<float>().swap(seq->embeddings);  // No longer needed.
  return absl::OkStatus();
}

void Engine::EncodeWorker(int index) {
  NameThread("encode", index);
  while (std::optional<std::unique_ptr<Sequence>> next = submit_queue_->Pop()) {
    std::unique_ptr<Sequence> seq = std::move(*next);
    if (stop_) {
      Finish(std::move(seq), Cancelled());
      continue;
    }
    if (!Encode(seq)) continue;
    seq->queued_ns = telemetry_.clock->NowNanos();
    if (!prefill_queue_->Push(seq)) Finish(std::move(seq), Cancelled());
  }
}

void Engine::PrefillWorker(int index) {
  NameThread("prefill", index);
  ForwardContext ctx(telemetry_.clock, telemetry_.tracer, &stats_);
  while (std::optional<std::unique_ptr<Sequence>> next =
             prefill_queue_->Pop()) {
    std::unique_ptr<Sequence> seq = std::move(*next);
    if (stop_) {
      Finish(std::move(seq), Cancelled());
      continue;
    }
    stats_.queue_ns.fetch_add(telemetry_.clock->NowNanos() - seq->queued_ns);
    // Waits while the prefill cache is full (transfers free it).
    absl::StatusOr<Residency> residency =
        prefill_cache_->Reserve(seq->prompt_len(), /*wait=*/true);
    if (!residency.ok()) {
      Finish(std::move(seq), residency.status());
      continue;
    }
    seq->residency = std::move(*residency);
    prefill_cache_->states()->Clear(seq->residency.slot);
    absl::Status status;
    while (status.ok() && seq->prefilled < seq->prompt_len()) {
      status = PrefillChunk(seq.get(), options_.token_budget, &ctx);
    }
    if (!status.ok() || seq->done()) {
      Finish(std::move(seq), status);
    } else {
      transfer_->Submit(std::move(seq));
    }
  }
}

void Engine::DecodeWorker(int index) {
  NameThread("decode", index);
  ForwardContext ctx(telemetry_.clock, telemetry_.tracer, &stats_);
  DecodeBatch batch(model_, decode_cache_.get(), options_.max_batch_size,
                    telemetry_,
                    [this](std::unique_ptr<Sequence> s, absl::Status st) {
                      Finish(std::move(s), std::move(st));
                    });
  // A decode step is one token per sequence.
  const int limit = std::min(options_.max_batch_size, options_.token_budget);
  while (!stop_) {
    const int room = limit - batch.size();
    if (room > 0) {
      // Join between steps; sleep only when there is nothing to decode.
      std::vector<std::unique_ptr<Sequence>> arrivals =
          transfer_->TakeReady(room, /*wait=*/batch.empty());
      if (arrivals.empty() && batch.empty()) break;  // Shut down.
      const int64_t now = telemetry_.clock->NowNanos();
      for (std::unique_ptr<Sequence>& seq : arrivals) {
        stats_.queue_ns.fetch_add(now - seq->queued_ns);
        batch.Add(std::move(seq));
      }
    }
    batch.Step(&ctx);
  }
  batch.FinishAll(Cancelled());
}

void Engine::ColocatedWorker(int index) {
  NameThread("worker", index);
  ForwardContext ctx(telemetry_.clock, telemetry_.tracer, &stats_);
  PoolCache* cache = decode_cache_.get();
  DecodeBatch batch(model_, cache, options_.max_batch_size, telemetry_,
                    [this](std::unique_ptr<Sequence> s, absl::Status st) {
                      Finish(std::move(s), std::move(st));
                    });
  // The request this worker is prefilling (one at a time).
  std::unique_ptr<Sequence> pending;
  while (!stop_) {
    if (pending == nullptr && batch.free_rows() > 0) {
      std::optional<std::unique_ptr<Sequence>> next =
          batch.empty() ? submit_queue_->Pop() : submit_queue_->TryPop();
      if (!next.has_value() && batch.empty()) break;  // Shut down.
      if (next.has_value() && Encode(*next)) pending = std::move(*next);
    }
    if (pending != nullptr && pending->residency.cache == nullptr) {
      // Room for the whole generation. Wait for it only with an empty
      // batch: otherwise this worker's own batch must go on to free room.
      const int tokens = pending->cached_tokens();
      const bool wait = batch.empty();
      absl::StatusOr<Residency> residency = cache->Reserve(tokens, wait);
      if (residency.ok()) {
        pending->residency = std::move(*residency);
        cache->states()->Clear(pending->residency.slot);
      } else if (wait || cache->NeverFits(tokens) ||
                 !absl::IsResourceExhausted(residency.status())) {
        Finish(std::move(pending), residency.status());
      }
    }
    if (pending != nullptr && pending->residency.cache != nullptr) {
      const absl::Status status = PrefillChunk(
          pending.get(), options_.token_budget - batch.size(), &ctx);
      if (!status.ok() || pending->done()) {
        Finish(std::move(pending), status);
      } else if (pending->prefilled == pending->prompt_len()) {
        batch.Add(std::move(pending));
      }
    }
    if (!batch.empty()) batch.Step(&ctx);
  }
  if (pending != nullptr) Finish(std::move(pending), Cancelled());
  batch.FinishAll(Cancelled());
}

}  // namespace densegate::runtime
