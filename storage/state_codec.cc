#include "storage/state_codec.h"

#include "state.pb.h"

namespace ringlimit::storage {

std::string EncodeStateValue(const StoredState& s, limiter::TimeNs expiry) {
  // One message per thread, cleared and reused: the flusher encodes thousands of values per batch and
  // Clear() keeps the sub-message and repeated-field allocations.
  thread_local state::StoredState msg;
  msg.Clear();
  state::LimitSpec* spec = msg.mutable_spec();
  spec->set_algorithm(static_cast<state::Algorithm>(s.spec.algorithm));
  spec->set_limit(s.spec.limit);
  spec->set_window_ns(s.spec.window);
  spec->set_burst(s.spec.burst);
  spec->set_buckets(s.spec.buckets);
  spec->set_max_delay_ns(s.spec.max_delay);
  spec->set_mode(static_cast<state::Mode>(s.spec.mode));
  spec->set_soft_pct(s.spec.soft_pct);
  spec->set_dynamic_limit(s.spec.dynamic_limit);
  spec->set_count_denied(s.spec.count_denied);
  msg.set_fingerprint(limiter::Fingerprint(s.spec));
  msg.set_state_algorithm(static_cast<state::Algorithm>(s.state.algorithm));
  for (int64_t w : s.state.word) msg.add_word(w);
  msg.mutable_tail()->Add(s.state.tail.begin(), s.state.tail.end());
  msg.set_version(s.version);
  msg.set_expiry_ns(expiry);
  return msg.SerializeAsString();
}

std::optional<StoredState> DecodeStateValue(std::string_view name, std::string_view value) {
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size())) || msg.word_size() != 3) {
    return std::nullopt;
  }
  StoredState s;
  s.name = std::string(name);
  const state::LimitSpec& spec = msg.spec();
  if (spec.algorithm() < state::ALGORITHM_FIXED_WINDOW || spec.algorithm() > state::ALGORITHM_GCRA ||
      spec.mode() < state::MODE_HARD || spec.mode() > state::MODE_DYNAMIC || msg.state_algorithm() < 0 ||
      msg.state_algorithm() > state::ALGORITHM_GCRA) {
    return std::nullopt;
  }
  s.spec.algorithm = static_cast<limiter::Algorithm>(spec.algorithm());
  s.spec.limit = spec.limit();
  s.spec.window = spec.window_ns();
  s.spec.burst = spec.burst();
  s.spec.buckets = spec.buckets();
  s.spec.max_delay = spec.max_delay_ns();
  s.spec.mode = static_cast<limiter::Mode>(spec.mode());
  s.spec.soft_pct = spec.soft_pct();
  s.spec.dynamic_limit = spec.dynamic_limit();
  s.spec.count_denied = spec.count_denied();
  if (limiter::Validate(s.spec).has_value()) return std::nullopt;
  s.state.algorithm = static_cast<limiter::Algorithm>(msg.state_algorithm());
  for (int i = 0; i < 3; ++i) s.state.word[i] = msg.word(i);
  s.state.tail.assign(msg.tail().begin(), msg.tail().end());
  s.version = msg.version();
  return s;
}

std::optional<limiter::TimeNs> DecodeExpiry(std::string_view value) {
  state::StoredState msg;
  if (!msg.ParseFromArray(value.data(), static_cast<int>(value.size()))) return std::nullopt;
  return msg.expiry_ns();
}

}  // namespace ringlimit::storage
