// GrpcServer: the node's gRPC port (--grpc-listen), serving Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) and Gubernator's pb.gubernator.V1
// (GetRateLimits, HealthCheck) with gRPC's callback API. It knows the transport only: each call is handed
// to the adapters (node/envoy ShouldRateLimit, node/gubernator GetRateLimits and FillHealthCheck), and its
// reactor finishes when the routed decisions are in -- a gRPC thread never waits for a forwarded check.
//
// Thread safety: Start, Stop and port() must not race with each other; the service itself runs on
// gRPC's threads. Lifetime: the service, config holder and metrics must outlive the GrpcServer; Stop
// (or the destructor) waits for calls in flight, so it must run before they die.
#ifndef RINGLIMIT_NODE_SERVER_GRPC_SERVER_H_
#define RINGLIMIT_NODE_SERVER_GRPC_SERVER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace grpc {
class Server;
}

namespace ringlimit::node {

struct CheckService;
class Metrics;
namespace rls {
class RlsConfigHolder;
}

struct GrpcServerOptions {
  // --- Affects behaviour ---

  // Listen address and port (port 0 = ephemeral, see GrpcServer::port()). Default: 127.0.0.1:0.
  std::string address = "127.0.0.1";
  uint16_t port = 0;

  // Largest request message; a larger one gets RESOURCE_EXHAUSTED. Default: 1 MiB.
  int max_message_bytes = 1 << 20;

  // TLS: PEM certificate chain and private key files (both or neither; the HTTP API's --tls-cert and
  // --tls-key). Default: empty (plaintext).
  std::string tls_cert_file;
  std::string tls_key_file;

  // How long Stop lets calls in flight finish before cancelling them. Default: 5000 ms.
  std::chrono::milliseconds drain_timeout{5'000};
};

class GrpcServer {
 public:
  GrpcServer(GrpcServerOptions options, CheckService& service, rls::RlsConfigHolder& config,
             Metrics& metrics);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and starts serving. Errors: AlreadyExists (started before), IOError (cannot read the TLS
  // files, cannot listen: address in use, ...).
  [[nodiscard]] Status Start();

  // Stops accepting, lets calls in flight finish (up to drain_timeout), then stops. Idempotent.
  void Stop();

  // The bound port (the ephemeral one if options.port was 0). 0 before Start.
  [[nodiscard]] uint16_t port() const { return port_; }

 private:
  class Service;
  class GubernatorService;

  const GrpcServerOptions options_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<GubernatorService> gubernator_;
  std::unique_ptr<grpc::Server> server_;
  uint16_t port_ = 0;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_GRPC_SERVER_H_
