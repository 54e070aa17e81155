// AnswerOnce: runs a decision whose completion must be called exactly once, whatever happens -- the
// adapters' guard around the service (node/envoy, node/gubernator).
//
// Thread safety: the completion may be called from any thread; later calls are dropped.
#ifndef RINGLIMIT_NODE_SERVICE_ANSWER_ONCE_H_
#define RINGLIMIT_NODE_SERVICE_ANSWER_ONCE_H_

#include <spdlog/spdlog.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "node/service/api_error.h"

namespace ringlimit::node {

// Calls decide(answer), where `answer` passes on to `done` once: an exception thrown by `decide` before
// it answered still answers, with kInternal (and later answers are dropped). `what` names the call in
// the log.
template <typename Decide>
void AnswerOnce(std::string_view what, std::function<void(std::optional<ApiError>)> done, Decide&& decide) {
  struct Once {
    std::atomic<bool> answered{false};
    std::function<void(std::optional<ApiError>)> done;
  };
  auto once = std::make_shared<Once>();
  once->done = std::move(done);
  auto answer = [once](std::optional<ApiError> error) {
    if (once->answered.exchange(true)) return;
    once->done(std::move(error));
  };
  try {
    decide(answer);
  } catch (const std::exception& e) {
    spdlog::error("api: {} failed: {}", what, e.what());
    answer(ApiError{ErrorKind::kInternal, "internal error"});
  }
}

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_ANSWER_ONCE_H_
