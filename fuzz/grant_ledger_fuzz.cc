// Fuzz target: limiter::ParseGrantLedger, the decoder of quota grants' record (grant_ledger.h), which will
// live in stored rows and replicated states: the bytes come from disk and from peers.
//
// Invariants, for every input that parses:
//  - the encoding is canonical: EncodeGrantLedger(ParseGrantLedger(b)) == b;
//  - MergeLedgers is idempotent and the result of merging, settling and collecting round-trips;
//  - Outstanding never counts less than the units reported used of an unsettled grant.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "limiter/grant_ledger.h"

namespace {

using namespace ringlimit::limiter;
using ringlimit::Result;

void CheckRoundTrip(const GrantLedger& ledger, const char* what) {
  Result<GrantLedger> again = ParseGrantLedger(EncodeGrantLedger(ledger));
  FUZZ_CHECK(again.ok(), what);
  FUZZ_CHECK(*again == ledger, what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<GrantLedger> parsed = ParseGrantLedger(bytes);
  if (!parsed.ok()) return 0;
  const GrantLedger& ledger = *parsed;
  FUZZ_CHECK(EncodeGrantLedger(ledger) == bytes, "the encoding is not canonical");
  FUZZ_CHECK(MergeLedgers(ledger, ledger) == ledger, "MergeLedgers(l, l) != l");

  LimitSpec spec;
  spec.algorithm = Algorithm::kTokenBucket;
  spec.limit = 10;
  spec.window = kSecond;
  uint64_t used = 0;
  for (const GrantRecord& r : ledger.records) {
    FUZZ_CHECK(Counted(r) >= r.used, "a grant counts less than its use");
    if (!r.settled) used = used > UINT64_MAX - r.used ? UINT64_MAX : used + r.used;
  }
  FUZZ_CHECK(Outstanding(spec, ledger, State{}, 0) >= used, "outstanding below the units used");

  GrantLedger changed = ledger;
  if (!ledger.records.empty()) {  // settle the first grant: by a Release (odd ids) or by the reclaim
    const GrantRecord& r = ledger.records.front();
    (void)SettleGrant(changed, r.id, (r.id & 1) ? std::optional<uint64_t>(r.used) : std::nullopt);
  }
  CheckRoundTrip(changed, "a settled ledger does not round-trip");
  FUZZ_CHECK(MergeLedgers(changed, ledger) == MergeLedgers(ledger, changed), "MergeLedgers not commutative");
  CheckRoundTrip(MergeLedgers(changed, ledger), "a merged ledger does not round-trip");
  if (!ledger.records.empty()) {
    CollectGrants(changed, ledger.records.back().at);
    CheckRoundTrip(changed, "a collected ledger does not round-trip");
  }
  return 0;
}
