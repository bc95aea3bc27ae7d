#include "agent/experiment_service.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace densegate::agent {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}


}  // namespace

bool OutcomeFinal(const v1::Evaluation& e) {
  if (e.state() != v1::FINISHED && e.state() != v1::CANCELLED && e.state() != v1::DEAD) {
    return false;
  }
  if (e.candidate().target_branch().empty() || e.verdict().decision() != v1::ACCEPT) return true;
  // Accepted toward a branch: queued, confirmed, perhaps re-measured on a
  // moved tip or held for approval, until it lands or fails.
  return e.merge().state() == v1::MERGED || e.merge().state() == v1::MERGE_FAILED;
}

absl::StatusOr<v1::Evaluation> AwaitOutcome(ExperimentService* service, const std::string& id,
                                            absl::Duration poll) {
  std::string at = id;
  while (true) {
    absl::StatusOr<v1::Evaluation> e = service->Get(at);
    if (!e.ok()) return e.status();
    if (!e->continued_by().empty()) {
      at = e->continued_by();
      continue;
    }
    if (OutcomeFinal(*e)) return e;
    absl::SleepFor(poll);
  }
}

absl::StatusOr<v1::Campaign> GrpcExperimentService::CreateCampaign(const v1::Campaign& campaign) {
  grpc::ClientContext ctx;
  attach_(&ctx);
  v1::CreateCampaignRequest req;
  *req.mutable_campaign() = campaign;
  v1::Campaign out;
  if (absl::Status s = FromGrpc(stub_->CreateCampaign(&ctx, req, &out)); !s.ok()) return s;
  return out;
}

absl::StatusOr<v1::Campaign> GrpcExperimentService::GetCampaign(const std::string& id) {
  grpc::ClientContext ctx;
  attach_(&ctx);
  v1::GetCampaignRequest req;
  req.set_id(id);
  v1::Campaign out;
  if (absl::Status s = FromGrpc(stub_->GetCampaign(&ctx, req, &out)); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::vector<v1::Evaluation>> GrpcExperimentService::ListCampaign(
    const std::string& id) {
  std::vector<v1::Evaluation> out;
  v1::ListEvaluationsRequest req;
  req.set_campaign(id);
  req.set_page_size(500);
  do {
    grpc::ClientContext ctx;
    attach_(&ctx);
    v1::ListEvaluationsResponse page;
    if (absl::Status s = FromGrpc(stub_->ListEvaluations(&ctx, req, &page)); !s.ok()) return s;
    for (v1::Evaluation& e : *page.mutable_evaluations()) out.push_back(std::move(e));
    req.set_page_token(page.next_page_token());
  } while (!req.page_token().empty());
  std::reverse(out.begin(), out.end());  // The store lists newest first.
  return out;
}

absl::StatusOr<v1::Evaluation> GrpcExperimentService::Submit(const v1::SubmitRequest& request) {
  grpc::ClientContext ctx;
  attach_(&ctx);
  v1::SubmitResponse resp;
  if (absl::Status s = FromGrpc(stub_->Submit(&ctx, request, &resp)); !s.ok()) return s;
  return resp.evaluation();
}

absl::StatusOr<v1::Evaluation> GrpcExperimentService::Get(const std::string& id) {
  grpc::ClientContext ctx;
  attach_(&ctx);
  v1::GetEvaluationRequest req;
  req.set_id(id);
  v1::Evaluation out;
  if (absl::Status s = FromGrpc(stub_->GetEvaluation(&ctx, req, &out)); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::string> GrpcExperimentService::FeedbackSummary(const std::string& id) {
  grpc::ClientContext ctx;
  attach_(&ctx);
  v1::GetFeedbackRequest req;
  req.set_evaluation_id(id);
  req.set_summary_only(true);
  std::unique_ptr<grpc::ClientReader<v1::FeedbackChunk>> reader = stub_->GetFeedback(&ctx, req);
  v1::FeedbackChunk chunk;
  std::string summary;
  while (reader->Read(&chunk)) {
    if (chunk.has_info()) summary = chunk.info().summary_json();
  }
  if (absl::Status s = FromGrpc(reader->Finish()); !s.ok()) return s;
  return summary;
}

}  // namespace densegate::agent
