// Protobuf helpers of the fuzz targets that decode Protobuf messages.
//
// Thread safety: QuietProtobuf is called once per process, before the first input.
#ifndef RINGLIMIT_FUZZ_PROTO_UTIL_H_
#define RINGLIMIT_FUZZ_PROTO_UTIL_H_

#include <google/protobuf/stubs/logging.h>

#include <cstdlib>

#include "state.pb.h"

namespace ringlimit::fuzz {

// Protobuf logs every string field holding invalid UTF-8 it parses; with random input that is most of
// them, and the log would drown libFuzzer's own output. Parsing still fails as before.
inline bool QuietProtobuf() {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}

// Whether a failed round trip of this stored row is the known bug below, exempted until it is fixed:
// a row written before states were mergeable (three words, no merged bytes). With the environment
// variable RINGLIMIT_FUZZ_KNOWN_BUGS set, nothing is exempted (to reproduce it: fuzz/known-bugs/).
//
// KNOWN BUG (reported with issue 16, item 7; not fixed here: limiter/merge.cc FromPlain and
// storage/state_codec.cc were being changed elsewhere): such a row with out-of-range words -- e.g. a
// token bucket whose level word is negative -- decodes to a merged state that EncodeMergeState writes
// and ParseMergeState then refuses ("negative level"), so the row is lost the next time it is written.
// Once fixed: remove this exemption and move the reproducers of fuzz/known-bugs/ into the corpora.
inline bool KnownBugExempt(const state::StoredState& message) {
  static const bool report_all = std::getenv("RINGLIMIT_FUZZ_KNOWN_BUGS") != nullptr;
  return !report_all && message.merged().empty() && message.word_size() > 0;
}

}  // namespace ringlimit::fuzz

#endif  // RINGLIMIT_FUZZ_PROTO_UTIL_H_
