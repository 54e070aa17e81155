// Protobuf helpers of the fuzz targets that decode Protobuf messages.
//
// Thread safety: QuietProtobuf is called once per process, before the first input.
#ifndef RINGLIMIT_FUZZ_PROTO_UTIL_H_
#define RINGLIMIT_FUZZ_PROTO_UTIL_H_

#include <google/protobuf/stubs/logging.h>

#include "state.pb.h"

namespace ringlimit::fuzz {

// Protobuf logs every string field holding invalid UTF-8 it parses; with random input that is most of
// them, and the log would drown libFuzzer's own output. Parsing still fails as before.
inline bool QuietProtobuf() {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}

}  // namespace ringlimit::fuzz

#endif  // RINGLIMIT_FUZZ_PROTO_UTIL_H_
