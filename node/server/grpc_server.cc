#include "node/server/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gubernator/gubernator.grpc.pb.h"
#include "node/envoy/rls_config.h"
#include "node/envoy/rls_handlers.h"
#include "node/gubernator/gubernator_handlers.h"
#include "node/metrics/metrics.h"
#include "node/service/check_service.h"

namespace ringlimit::node {

namespace {

namespace rlsv3 = envoy::service::ratelimit::v3;

// The one place API error kinds become gRPC status codes.
grpc::StatusCode GrpcCodeOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadJson:
    case ErrorKind::kInvalidField:
    case ErrorKind::kTooManyChecks:
    case ErrorKind::kUnknownPolicy:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case ErrorKind::kNotReady:
    case ErrorKind::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case ErrorKind::kUnauthorized:
      return grpc::StatusCode::UNAUTHENTICATED;
    case ErrorKind::kNotFound:
    case ErrorKind::kMethodNotAllowed:
    case ErrorKind::kUnsupportedMediaType:
      return grpc::StatusCode::UNIMPLEMENTED;
    case ErrorKind::kInternal:
      break;
  }
  return grpc::StatusCode::INTERNAL;
}

GrpcResult ResultOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return GrpcResult::kInvalidArgument;
    case grpc::StatusCode::UNAVAILABLE:
      return GrpcResult::kUnavailable;
    default:
      return GrpcResult::kInternal;
  }
}

}  // namespace

class GrpcServer::Service final : public rlsv3::RateLimitService::CallbackService {
 public:
  Service(CheckService& service, rls::RlsConfigHolder& config, Metrics& metrics)
      : service_(service), config_(config), metrics_(metrics) {}

  grpc::ServerUnaryReactor* ShouldRateLimit(grpc::CallbackServerContext* context,
                                            const rlsv3::RateLimitRequest* request,
                                            rlsv3::RateLimitResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const auto start = std::chrono::steady_clock::now();
    Metrics& metrics = metrics_;
    // Runs on whichever thread completes the last decision; must not block (Finish does not).
    node::ShouldRateLimit(service_, config_.Current(), *request, response,
                          [reactor, response, start, &metrics](std::optional<ApiError> error) {
                            const auto latency = std::chrono::steady_clock::now() - start;
                            if (error) {
                              const grpc::StatusCode code = GrpcCodeOf(error->kind);
                              metrics.CountGrpc(GrpcMethod::kShouldRateLimit, ResultOf(code), latency);
                              reactor->Finish(grpc::Status(code, error->message));
                              return;
                            }
                            const bool over =
                                response->overall_code() == rlsv3::RateLimitResponse::OVER_LIMIT;
                            metrics.CountGrpc(GrpcMethod::kShouldRateLimit,
                                              over ? GrpcResult::kOverLimit : GrpcResult::kOk, latency);
                            reactor->Finish(grpc::Status::OK);
                          });
    return reactor;
  }

 private:
  CheckService& service_;
  rls::RlsConfigHolder& config_;
  Metrics& metrics_;
};

// Gubernator's V1 on the same port: GetRateLimits with the semantics of POST /v1/GetRateLimits.
class GrpcServer::GubernatorService final : public pb::gubernator::V1::CallbackService {
 public:
  GubernatorService(CheckService& service, Metrics& metrics) : service_(service), metrics_(metrics) {}

  grpc::ServerUnaryReactor* GetRateLimits(grpc::CallbackServerContext* context,
                                          const pb::gubernator::GetRateLimitsReq* request,
                                          pb::gubernator::GetRateLimitsResp* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const auto start = std::chrono::steady_clock::now();
    Metrics& metrics = metrics_;
    node::GetRateLimits(service_, *request, response,
                        [reactor, response, start, &metrics](std::optional<ApiError> error) {
                          const auto latency = std::chrono::steady_clock::now() - start;
                          if (error) {
                            const auto code = static_cast<grpc::StatusCode>(GubernatorGrpcCode(error->kind));
                            metrics.CountGrpc(GrpcMethod::kGetRateLimits, ResultOf(code), latency);
                            reactor->Finish(grpc::Status(code, error->message));
                            return;
                          }
                          bool over = false;
                          for (const auto& r : response->responses())
                            over |= r.status() == pb::gubernator::OVER_LIMIT;
                          metrics.CountGrpc(GrpcMethod::kGetRateLimits,
                                            over ? GrpcResult::kOverLimit : GrpcResult::kOk, latency);
                          reactor->Finish(grpc::Status::OK);
                        });
    return reactor;
  }

  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* context,
                                        const pb::gubernator::HealthCheckReq* /*request*/,
                                        pb::gubernator::HealthCheckResp* response) override {
    const auto start = std::chrono::steady_clock::now();
    FillHealthCheck(service_, response);
    metrics_.CountGrpc(GrpcMethod::kHealthCheck, GrpcResult::kOk, std::chrono::steady_clock::now() - start);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  CheckService& service_;
  Metrics& metrics_;
};

GrpcServer::GrpcServer(GrpcServerOptions options, CheckService& service, rls::RlsConfigHolder& config,
                       Metrics& metrics)
    : options_(std::move(options)),
      service_(std::make_unique<Service>(service, config, metrics)),
      gubernator_(std::make_unique<GubernatorService>(service, metrics)) {}

GrpcServer::~GrpcServer() { Stop(); }

Status GrpcServer::Start() {
  if (server_) return Status::AlreadyExists("the gRPC server is already started");
  const std::string host =
      options_.address.find(':') != std::string::npos ? "[" + options_.address + "]" : options_.address;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options_.tls_cert_file.empty()) {
    auto read = [](const std::string& path, std::string* out) {
      std::ifstream in(path);
      std::ostringstream text;
      if (!in || !(text << in.rdbuf())) return false;
      *out = text.str();
      return true;
    };
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!read(options_.tls_cert_file, &pair.cert_chain))
      return Status::IOError("cannot read " + options_.tls_cert_file);
    if (!read(options_.tls_key_file, &pair.private_key))
      return Status::IOError("cannot read " + options_.tls_key_file);
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    credentials = grpc::SslServerCredentials(ssl);
  }
  int bound = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(host + ":" + std::to_string(options_.port), credentials, &bound);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.RegisterService(service_.get());
  builder.RegisterService(gubernator_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || bound == 0) {
    server_.reset();
    return Status::IOError("cannot listen for gRPC on " + host + ":" + std::to_string(options_.port));
  }
  port_ = static_cast<uint16_t>(bound);
  spdlog::info("gRPC (Envoy rate limit service, Gubernator V1) listening on {}:{}", host, port_);
  return Status::OK();
}

void GrpcServer::Stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now() + options_.drain_timeout);
  server_->Wait();
  server_.reset();
}

}  // namespace ringlimit::node
