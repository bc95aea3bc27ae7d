// Builds a server and a client from the generated API and round-trips calls
// over loopback on a port chosen by the kernel (port 0): one unary call per
// service and the WatchEvaluation server stream.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "grpcpp/grpcpp.h"
#include "proto/densegate.grpc.pb.h"

namespace densegate {
namespace {

using ::grpc::ServerContext;
using ::grpc::Status;

// Answers from fixed data; enough to prove the stubs, the wire format and the
// streaming plumbing work end to end.
class FakeDensegate final : public v1::Densegate::Service {
 public:
  Status GetEvaluation(ServerContext*, const v1::GetEvaluationRequest* req,
                       v1::Evaluation* resp) override {
    if (req->id().empty()) {
      return Status(grpc::StatusCode::INVALID_ARGUMENT, "id is required");
    }
    resp->set_id(req->id());
    resp->set_state(v1::FINISHED);
    resp->mutable_candidate()->set_kind(v1::EXPERIMENT);
    resp->mutable_candidate()->add_claims()->set_metric("kda_decode.fused_b32");
    resp->mutable_verdict()->set_decision(v1::ACCEPT);
    auto* metric = resp->mutable_verdict()->add_metrics();
    metric->set_metric("kda_decode.fused_b32");
    metric->set_speedup(1.74);
    return Status::OK;
  }

  Status WatchEvaluation(ServerContext*, const v1::WatchEvaluationRequest* req,
                         grpc::ServerWriter<v1::EvaluationEvent>* writer) override {
    int64_t seq = req->after_sequence();
    for (v1::StageKind kind : {v1::BUILD, v1::CORRECTNESS, v1::PRECISION}) {
      v1::EvaluationEvent event;
      event.set_evaluation_id(req->id());
      event.set_sequence(++seq);
      event.mutable_stage()->set_kind(kind);
      event.mutable_stage()->set_status(v1::STAGE_PASSED);
      writer->Write(event);
    }
    v1::EvaluationEvent done;
    done.set_evaluation_id(req->id());
    done.set_sequence(++seq);
    done.mutable_verdict()->set_decision(v1::REJECT);
    writer->Write(done);
    return Status::OK;
  }
};

class FakeNodeService final : public v1::NodeService::Service {
 public:
  Status RegisterNode(ServerContext*, const v1::RegisterNodeRequest* req,
                      v1::RegisterNodeResponse* resp) override {
    resp->set_node_id("node-" + req->dimensions().accelerator_kind());
    resp->set_heartbeat_interval_s(10);
    return Status::OK;
  }
};

class ApiSmokeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&densegate_);
    builder.RegisterService(&nodes_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  int port_ = 0;
  FakeDensegate densegate_;
  FakeNodeService nodes_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(ApiSmokeTest, UnaryCallRoundTrips) {
  auto stub = v1::Densegate::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::GetEvaluationRequest req;
  req.set_id("ev-42");
  v1::Evaluation resp;
  Status status = stub->GetEvaluation(&ctx, req, &resp);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.id(), "ev-42");
  EXPECT_EQ(resp.state(), v1::FINISHED);
  EXPECT_EQ(resp.verdict().decision(), v1::ACCEPT);
  ASSERT_EQ(resp.verdict().metrics_size(), 1);
  EXPECT_DOUBLE_EQ(resp.verdict().metrics(0).speedup(), 1.74);
}

TEST_F(ApiSmokeTest, ErrorStatusCrossesTheWire) {
  auto stub = v1::Densegate::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::Evaluation resp;
  Status status = stub->GetEvaluation(&ctx, v1::GetEvaluationRequest(), &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "id is required");
}

TEST_F(ApiSmokeTest, ServerStreamDeliversEventsInOrder) {
  auto stub = v1::Densegate::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::WatchEvaluationRequest req;
  req.set_id("ev-7");
  req.set_after_sequence(10);
  auto reader = stub->WatchEvaluation(&ctx, req);
  v1::EvaluationEvent event;
  std::vector<int64_t> sequences;
  std::vector<v1::StageKind> stages;
  bool saw_verdict = false;
  while (reader->Read(&event)) {
    sequences.push_back(event.sequence());
    if (event.has_stage()) stages.push_back(event.stage().kind());
    if (event.has_verdict()) saw_verdict = event.verdict().decision() == v1::REJECT;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(sequences, (std::vector<int64_t>{11, 12, 13, 14}));
  EXPECT_EQ(stages, (std::vector<v1::StageKind>{v1::BUILD, v1::CORRECTNESS,
                                                v1::PRECISION}));
  EXPECT_TRUE(saw_verdict);
}

TEST_F(ApiSmokeTest, NodeServiceRoundTrips) {
  auto stub = v1::NodeService::NewStub(channel_);
  grpc::ClientContext ctx;
  v1::RegisterNodeRequest req;
  req.mutable_dimensions()->set_accelerator_kind("cpu");
  req.mutable_dimensions()->set_cpu_cores(2);
  v1::RegisterNodeResponse resp;
  ASSERT_TRUE(stub->RegisterNode(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.node_id(), "node-cpu");
  EXPECT_EQ(resp.heartbeat_interval_s(), 10);
}

}  // namespace
}  // namespace densegate
