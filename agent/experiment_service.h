// ExperimentService: what a campaign needs of the scheduler (its API,
// narrowed). GrpcExperimentService speaks densegate.proto's Densegate
// service; tests may substitute their own.
//
// Thread-safety: GrpcExperimentService may be used from several threads
// (each call has its own context).
#ifndef DENSEGATE_AGENT_EXPERIMENT_SERVICE_H_
#define DENSEGATE_AGENT_EXPERIMENT_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/densegate.grpc.pb.h"

namespace densegate::agent {

class ExperimentService {
 public:
  virtual ~ExperimentService() = default;
  virtual absl::StatusOr<v1::Campaign> CreateCampaign(const v1::Campaign& campaign) = 0;
  virtual absl::StatusOr<v1::Campaign> GetCampaign(const std::string& id) = 0;
  // Every evaluation of the campaign, oldest first.
  virtual absl::StatusOr<std::vector<v1::Evaluation>> ListCampaign(const std::string& id) = 0;
  virtual absl::StatusOr<v1::Evaluation> Submit(const v1::SubmitRequest& request) = 0;
  virtual absl::StatusOr<v1::Evaluation> Get(const std::string& id) = 0;
  // The evaluation's feedback.json; NotFound when its node left none.
  virtual absl::StatusOr<std::string> FeedbackSummary(const std::string& id) = 0;
};

// Whether `e`'s outcome is final: it ended (FINISHED, CANCELLED or DEAD)
// and, when it was accepted toward a branch, its merge ended too (MERGED
// or MERGE_FAILED).
bool OutcomeFinal(const v1::Evaluation& e);

// Follows `id` until it ends (FINISHED, CANCELLED or DEAD), through a second
// part (Evaluation.continued_by); when it was accepted toward a branch, also
// until its merge ends (MERGED or MERGE_FAILED). Polls every `poll`.
absl::StatusOr<v1::Evaluation> AwaitOutcome(ExperimentService* service, const std::string& id,
                                            absl::Duration poll = absl::Seconds(1));

// The scheduler's gRPC API; `attach` adds the token to each call.
class GrpcExperimentService : public ExperimentService {
 public:
  GrpcExperimentService(std::unique_ptr<v1::Densegate::Stub> stub,
                        std::function<void(grpc::ClientContext*)> attach)
      : stub_(std::move(stub)), attach_(std::move(attach)) {}

  absl::StatusOr<v1::Campaign> CreateCampaign(const v1::Campaign& campaign) override;
  absl::StatusOr<v1::Campaign> GetCampaign(const std::string& id) override;
  absl::StatusOr<std::vector<v1::Evaluation>> ListCampaign(const std::string& id) override;
  absl::StatusOr<v1::Evaluation> Submit(const v1::SubmitRequest& request) override;
  absl::StatusOr<v1::Evaluation> Get(const std::string& id) override;
  absl::StatusOr<std::string> FeedbackSummary(const std::string& id) override;

 private:
  std::unique_ptr<v1::Densegate::Stub> stub_;
  std::function<void(grpc::ClientContext*)> attach_;
};

}  // namespace densegate::agent

#endif  // DENSEGATE_AGENT_EXPERIMENT_SERVICE_H_
