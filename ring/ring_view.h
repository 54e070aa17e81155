// RingView: an immutable, versioned consistent-hash ring over the 64-bit token space of RingToken.
//
// Placement
//  - Every member contributes `vnodes` virtual nodes. The position of vnode i of member `id` is
//    VnodePosition(id, i) = XXH3-64(id || i as 4 bytes little-endian): a pure function of the member set, so
//    every node that sees the same members computes the same ring, bit for bit.
//  - A vnode at position p owns the arc (previous position, p]; a token is owned by the first vnode at or
//    clockwise after it, wrapping past 2^64-1 to the smallest position. Lookups are a binary search over
//    the sorted vnode positions: O(log V), V = total vnodes.
//  - Two vnodes at the same position (a 64-bit hash collision) are ordered by member id; the second one
//    owns an empty arc. Deterministic, and harmless.
//
// Thread safety: a RingView is immutable after Create and safe for concurrent use by any number of
// threads. Views are shared as std::shared_ptr<const RingView>; pointers returned by a view (members)
// stay valid for as long as the view itself is alive. RingHolder publishes new views to readers.
#ifndef RINGLIMIT_RING_RING_VIEW_H_
#define RINGLIMIT_RING_RING_VIEW_H_

#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/published.h"
#include "base/status.h"
#include "ring/token.h"

namespace ringlimit::ring {

inline constexpr uint32_t kDefaultVnodes = 128;
inline constexpr uint32_t kMaxVnodes = 4096;       // per member; bounds the ring at 4096 * members
inline constexpr size_t kMaxMemberIdLength = 128;  // bytes

// One member as the ring sees it. A member's weight is its number of virtual nodes.
struct RingMember {
  std::string id;                    // REQUIRES: 1..kMaxMemberIdLength bytes, unique in a ring
  uint32_t vnodes = kDefaultVnodes;  // REQUIRES: 1..kMaxVnodes
  // Where the member is reached ("host:port" of its peer protocol); not used to place tokens, only in the
  // fingerprint, so that two nodes that call one member at different addresses (two hosts with one id)
  // disagree visibly. Empty: unknown (views built without addresses, e.g. by tests).
  std::string address{};

  bool operator==(const RingMember&) const = default;
};

// An inclusive, non-wrapping range of tokens [first, last]. With the RocksDB key layout (8-byte
// big-endian token prefix) it is one contiguous key range.
struct TokenRange {
  Token first = 0;
  Token last = 0;

  // Number of tokens in the range as a fraction of the whole token space (2^64).
  [[nodiscard]] double Fraction() const;
  [[nodiscard]] bool Contains(Token t) const { return first <= t && t <= last; }
  bool operator==(const TokenRange&) const = default;
};

// A range whose owner differs between two views. `from` is empty when the old view was empty; `to` is
// empty when the new view is empty.
struct RangeMove {
  TokenRange range;
  std::string from;
  std::string to;

  bool operator==(const RangeMove&) const = default;
};

class RingView;

// Compatibility, for the callers in node/cluster/ and replication/ until they call RingView::Create: the
// former result of RingView::Build. Do not use in new code.
struct RingError {
  std::string message;  // RingView::Create's Status message
};
struct RingBuildResult {
  std::shared_ptr<const RingView> view;  // null iff `error` is set
  std::optional<RingError> error;

  [[nodiscard]] bool ok() const { return view != nullptr; }
};

// The position of vnode `index` of member `id` on the ring.
[[nodiscard]] Token VnodePosition(std::string_view id, uint32_t index);

class RingView {
 public:
  // Builds the ring of `members` (any order; an empty list gives an empty ring, which owns nothing).
  // `version` is the caller's number for this view (RingHolder publishes only increasing versions).
  // Errors: InvalidArgument (an id empty or longer than kMaxMemberIdLength; vnodes 0 or more than
  // kMaxVnodes), AlreadyExists (two members with the same id).
  [[nodiscard]] static Result<std::shared_ptr<const RingView>> Create(uint64_t version,
                                                                      std::vector<RingMember> members);

  // This view without member `id` (version 0; the same view's members otherwise): how the ring looked to
  // the others before `id` joined, for handing a (re)joining member its ranges. Errors: as Create.
  [[nodiscard]] Result<std::shared_ptr<const RingView>> Without(std::string_view id) const;

  // Compatibility shim over Create for node/cluster/ and replication/ (see RingBuildResult).
  [[nodiscard]] static RingBuildResult Build(uint64_t version, std::vector<RingMember> members);

  RingView(const RingView&) = delete;
  RingView& operator=(const RingView&) = delete;

  // The caller-assigned version (local to the node that built the view).
  [[nodiscard]] uint64_t version() const { return version_; }

  // A hash of the member set (ids, vnodes and addresses): equal on every node that sees the same members
  // at the same addresses, so nodes can compare rings. 0 for the empty ring.
  [[nodiscard]] uint64_t fingerprint() const { return fingerprint_; }

  // Members sorted by id.
  [[nodiscard]] const std::vector<RingMember>& members() const { return members_; }
  [[nodiscard]] bool empty() const { return members_.empty(); }
  [[nodiscard]] size_t vnode_count() const { return positions_.size(); }

  // The member with this id, or nullptr.
  [[nodiscard]] const RingMember* Find(std::string_view id) const;

  // The owner of `token`; nullptr iff the ring is empty. O(log V).
  [[nodiscard]] const RingMember* Owner(Token token) const;

  // The owner of `token` followed by the next distinct members clockwise: min(r, members) entries,
  // all different, the owner first. Empty for an empty ring or r == 0. Held inline up to kInlineMembers
  // entries: no allocation per call on the check path (routing, the replication pass).
  static constexpr size_t kInlineMembers = 7;
  using MemberList = boost::container::small_vector<const RingMember*, kInlineMembers>;
  [[nodiscard]] MemberList PreferenceList(Token token, size_t r) const;

  // The fraction of the token space that `id` owns (0 if it is not a member). Sums to 1 over members.
  [[nodiscard]] double OwnedShare(std::string_view id) const;

  // The token ranges `id` owns, sorted, adjacent ranges merged. Empty if `id` is not a member.
  [[nodiscard]] std::vector<TokenRange> Arcs(std::string_view id) const;

  // The token ranges whose preference list of length `r` contains `id` (the ranges it holds a copy of),
  // sorted, adjacent ranges merged. Empty if `id` is not a member. O(V r).
  [[nodiscard]] std::vector<TokenRange> HeldRanges(std::string_view id, size_t r) const;

  // The ranges whose owner differs between `from` and `to`, sorted by range, adjacent ranges with the
  // same (from, to) merged. O((V1 + V2) log(V1 + V2)).
  [[nodiscard]] static std::vector<RangeMove> Diff(const RingView& from, const RingView& to);

 private:
  RingView(uint64_t version, std::vector<RingMember> members);

  // Index into vnodes_ of the vnode owning `token`. REQUIRES: !empty().
  size_t VnodeIndex(Token token) const;
  // Index into members_ of the owner of `token`, or -1 when empty.
  int64_t OwnerIndex(Token token) const;
  int64_t MemberIndex(std::string_view id) const;

  // Constant after construction.
  uint64_t version_;
  uint64_t fingerprint_ = 0;
  std::vector<RingMember> members_;  // sorted by id
  std::vector<Token> positions_;     // sorted; positions_[i] belongs to vnodes_[i]
  std::vector<uint32_t> vnode_member_;
  std::vector<double> shares_;  // per member
};

// Publishes the current RingView to concurrent readers: a Published<RingView> (base/published.h) whose
// version is the view's. Writers (membership changes) are rare; readers (every check) pay one atomic load
// while the view is unchanged: Current() reads through a per-thread cache and takes the writer mutex (for
// a pointer copy) only on its first read after a Publish, so a swap never waits for a reader's work and
// vice versa.
//
// Thread safety: all methods are safe for concurrent use without external synchronisation.
// Lifetime: a thread that called Current() keeps the view it last read alive until it reads again or
// exits (see Published); views are plain data.
class RingHolder {
 public:
  RingHolder() = default;
  RingHolder(const RingHolder&) = delete;
  RingHolder& operator=(const RingHolder&) = delete;

  // The current view; null before the first Publish.
  [[nodiscard]] std::shared_ptr<const RingView> Current() const { return published_.Current(); }

  // Version of the current view (0 before the first Publish). One atomic load.
  [[nodiscard]] uint64_t version() const { return published_.version(); }

  // Installs `view` if its version is greater than the current one (or it is the first); returns whether
  // it did. REQUIRES: view != nullptr.
  bool Publish(std::shared_ptr<const RingView> view) {
    const uint64_t version = view->version();
    return published_.PublishVersion(std::move(view), version);
  }

 private:
  friend class RingCache;

  Published<RingView> published_;
};

// A reader's own cached copy of a RingHolder's view (a Published<RingView>::Reader): Get() takes the
// holder's mutex only when the holder has published since the last call, so a hot path pays one atomic
// load per lookup.
//
// Thread safety: one RingCache per thread (or strand); not safe for concurrent use. The holder must
// outlive the cache.
class RingCache {
 public:
  explicit RingCache(const RingHolder& holder) : reader_(holder.published_) {}
  RingCache(const RingCache&) = delete;
  RingCache& operator=(const RingCache&) = delete;

  // The holder's current view (null before its first Publish). Valid until the next Get().
  [[nodiscard]] const std::shared_ptr<const RingView>& Get() { return reader_.Get(); }

 private:
  Published<RingView>::Reader reader_;
};

}  // namespace ringlimit::ring

#endif  // RINGLIMIT_RING_RING_VIEW_H_
