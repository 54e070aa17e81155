// The limiter core: pure rate-limiting algorithms with the clock injected.
//
// Contract
//  - Nothing here does I/O, reads a clock, allocates on the hot path of the O(1) algorithms, or keeps
//    global state. Every function is a pure function of its arguments (plus the State it is handed).
//  - Thread safety: all functions are reentrant. A State must not be used by two threads at once;
//    the caller (the storage tier) serialises access to each State.
//  - Time is integer nanoseconds (TimeNs) on a caller-chosen epoch; the node uses the Unix epoch.
//    Never floating-point time. Time may go backwards (clock skew after a failover): the core then
//    behaves as if no time had passed since the newest instant it has seen; it never crashes and never
//    mints quota because of it.
//  - "Over limit" is a Decision, not an error. Errors are only for invalid specifications (Validate).
#ifndef RINGLIMIT_LIMITER_LIMITER_H_
#define RINGLIMIT_LIMITER_LIMITER_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ringlimit::limiter {

using TimeNs = int64_t;      // an instant, nanoseconds since the caller's epoch
using DurationNs = int64_t;  // a span of time in nanoseconds, >= 0

// retry_after when the request's cost can never be admitted by this limit (cost > capacity).
inline constexpr DurationNs kNever = std::numeric_limits<DurationNs>::max();

inline constexpr DurationNs kMillisecond = 1'000'000;
inline constexpr DurationNs kSecond = 1'000 * kMillisecond;

// Bounds that every LimitSpec must respect (Validate enforces them). With them every count stays below
// 2^45 and every intermediate product (count * window, elapsed * limit) is computed exactly in 128 bits
// (see limiter/arith.h); nothing overflows for any int64 instant or uint64 cost.
inline constexpr uint64_t kMaxLimit = 1'000'000'000'000ULL;            // 1e12 units per window
inline constexpr DurationNs kMinWindow = kMillisecond;                 // 1 ms
inline constexpr DurationNs kMaxWindow = 366LL * 24 * 3600 * kSecond;  // about a year
inline constexpr uint64_t kMaxSlidingLogLimit = 10'000;                // one timestamp per admitted unit
inline constexpr uint32_t kMaxBuckets = 3'600;                         // sliding_window sub-buckets
inline constexpr uint64_t kMaxCost = kMaxLimit;                        // per request

enum class Algorithm : uint8_t {
  kFixedWindow = 1,
  kSlidingLog = 2,
  kSlidingWindow = 3,
  kSlidingWindowApprox = 4,
  kTokenBucket = 5,
  kLeakyBucket = 6,
  kGcra = 7,
  // fixed_window whose windows start at the first request after the previous window ended (not at
  // multiples of `window` since the epoch), and end `window` later: Gubernator's TOKEN_BUCKET.
  kAnchoredWindow = 8,
};

// How a limit's verdict is applied.
enum class Mode : uint8_t {
  kHard = 0,     // deny above the limit
  kSoft = 1,     // admit up to limit * (1 + soft_pct/100); Decision::beyond_limit says so
  kShadow = 2,   // never deny; Decision::would_deny reports what hard mode would have done
  kDynamic = 3,  // above limit, up to dynamic_limit, admit only while Request::headroom says so
};

// Canonical lower-case names ("fixed_window", "anchored_window", "sliding_log", "sliding_window",
// "sliding_window_approx", "token_bucket", "leaky_bucket", "gcra"; "hard", "soft", "shadow", "dynamic").
// Parse accepts exactly these names and returns nullopt for anything else.
std::string_view AlgorithmName(Algorithm algorithm);
std::optional<Algorithm> ParseAlgorithm(std::string_view name);
std::string_view ModeName(Mode mode);
std::optional<Mode> ParseMode(std::string_view name);

// One limit: "at most `limit` units per `window`", evaluated by `algorithm`.
struct LimitSpec {
  // --- Affects behaviour ---
  Algorithm algorithm = Algorithm::kTokenBucket;

  // Units admitted per window. REQUIRES: 1 <= limit <= kMaxLimit (kMaxSlidingLogLimit for sliding_log).
  uint64_t limit = 0;

  // Window length. REQUIRES: kMinWindow <= window <= kMaxWindow.
  DurationNs window = 0;

  // Capacity of token_bucket / leaky_bucket, and the burst of gcra (extra units admitted at once on top
  // of the first, delay tolerance = emission interval * burst). Ignored by the window algorithms.
  // Default (0): `limit` for token_bucket and leaky_bucket; 0 for gcra (strict spacing).
  // REQUIRES: <= kMaxLimit (token_bucket, leaky_bucket, gcra).
  uint64_t burst = 0;

  // sliding_window: number of sub-buckets the window is split into.
  // REQUIRES: 1 <= buckets <= kMaxBuckets and window / buckets >= 1 ms.
  uint32_t buckets = 60;

  // leaky_bucket only: 0 = meter (deny what does not fit now). > 0 = shaper: a request that does not fit
  // now but fits within max_delay is admitted with Decision::delay set to the time the caller must wait.
  // REQUIRES: 0 <= max_delay <= kMaxWindow; 0 for every other algorithm; and at most kMaxLimit units
  // queued (max_delay * limit / window <= kMaxLimit).
  DurationNs max_delay = 0;

  // The mode scales the capacity C (limit; bucket size for token/leaky; burst + 1 for gcra):
  //   kSoft     admits up to C + floor(C * soft_pct / 100);
  //   kDynamic  admits up to C + floor(E * headroom), E = floor(C * (dynamic_limit - limit) / limit)
  //             (for the window algorithms C = limit, so the ceiling is dynamic_limit at headroom 1).
  // REQUIRES: that largest ceiling <= 11 * kMaxLimit, and <= kMaxSlidingLogLimit for sliding_log.
  Mode mode = Mode::kHard;
  uint32_t soft_pct = 0;       // kSoft: allowed overshoot in percent. REQUIRES: <= 1000.
  uint64_t dynamic_limit = 0;  // kDynamic: ceiling. REQUIRES: limit <= dynamic_limit <= 11 * kMaxLimit.

  // When true a denied request is charged as well (seed 003: keeps a misbehaving caller locked out for
  // as long as it keeps hammering). Default false: a denied request consumes nothing. Buckets never
  // fill beyond their capacity; window algorithms record denied units up to 2x the ceiling. A request
  // whose cost can never pass (retry_after == kNever) is never charged.
  bool count_denied = false;

  bool operator==(const LimitSpec&) const = default;  // every field
};

// Why a LimitSpec is unusable: the offending field's name (as in LimitSpec) and a message for humans.
struct InvalidSpec {
  std::string field;
  std::string message;
};

// Returns nullopt when `spec` satisfies every REQUIRES above.
[[nodiscard]] std::optional<InvalidSpec> Validate(const LimitSpec& spec);

// A stable 64-bit fingerprint of the fields that give a State its meaning (algorithm, limit, window,
// effective burst, buckets). Stored next to a State so a parameter change can be detected.
[[nodiscard]] uint64_t Fingerprint(const LimitSpec& spec);

// The stored state of one (entity, limit) pair. A default-constructed State is the initial state
// ("nothing consumed yet"). Its meaning is private to the algorithm that last wrote it (recorded in
// `algorithm`); an algorithm handed a State written by another algorithm starts from the initial state.
// O(1) algorithms use only `word` (24 bytes); sliding_log and sliding_window also use `tail`.
struct State {
  Algorithm algorithm{};  // 0: never written
  int64_t word[3] = {0, 0, 0};
  std::vector<int64_t> tail;

  bool operator==(const State&) const = default;
};

// Per-call inputs.
struct Request {
  uint64_t cost = 1;     // units this request consumes. 0 = read-only peek. Any larger cost than the
                         // limit can admit is denied with retry_after = kNever (never an error).
  TimeNs now = 0;        // the current instant
  double headroom = 0.;  // kDynamic: spare capacity of the protected system in [0, 1]; clamped (NaN = 0).
};

// The verdict on one limit, and the figures a client needs.
struct Decision {
  bool allowed = false;        // what the caller must do (after the mode is applied)
  bool would_deny = false;     // the limit itself says no (true with allowed=true only in shadow mode)
  bool beyond_limit = false;   // admitted above `limit` by soft or dynamic mode
  uint64_t limit = 0;          // the limit in force (spec.limit; for soft/dynamic still spec.limit)
  uint64_t remaining = 0;      // units that could still be admitted now, after this request, without
                               // going beyond the limit (soft/dynamic overshoot not included)
  DurationNs reset_after = 0;  // until the state is back to its initial (empty/full) value
  DurationNs retry_after = 0;  // until a request of the same cost could pass; 0 if allowed; kNever
                               // when cost exceeds the largest ceiling. Exact: a request retried
                               // retry_after later passes if nothing else is charged meanwhile.
  DurationNs delay = 0;        // leaky_bucket shaping: how long the caller must wait before acting
};

// Evaluates one limit for `request` against `state` and, if admitted (or count_denied), charges it.
// REQUIRES: Validate(spec) returned nullopt.
Decision Check(const LimitSpec& spec, State& state, const Request& request);

// Evaluates without changing anything: what Check would decide.
[[nodiscard]] Decision Peek(const LimitSpec& spec, const State& state, const Request& request);

// Several limits on one entity, charged all-or-nothing: if any limit's decision is not `allowed`, none
// is charged (except count_denied limits, which charge the denied request). Writes one Decision per
// limit into `decisions` and returns true when every limit allowed the request. decisions[i].allowed
// is limit i's own verdict; its figures (remaining, reset_after) describe the state after what was
// actually charged. Allocates nothing beyond what the algorithms' tails need.
// REQUIRES: specs.size() == states.size() == decisions.size(); every spec valid; distinct states.
bool CheckAll(std::span<const LimitSpec* const> specs, std::span<State* const> states, const Request& request,
              std::span<Decision> decisions);

// The instant at which `state` is back to its initial value under `spec` if nothing more is charged.
// The storage tier may drop the state at or after that instant (and uses it as the stored expiry).
// A state that is already initial for `spec` (never written, or written by another algorithm) returns
// std::numeric_limits<TimeNs>::min().
[[nodiscard]] TimeNs IdleAt(const LimitSpec& spec, const State& state);

// Bytes of algorithm state kept per (entity, limit) pair for `spec` in the worst case
// (documented in docs/limiter.md; <= 24 for the O(1) algorithms).
[[nodiscard]] size_t StateBytes(const LimitSpec& spec);

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_LIMITER_H_
