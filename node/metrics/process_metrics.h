// The process metrics every Prometheus exporter has (process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds, process_max_fds,
// process_start_time_seconds), read from /proc/self, and ringlimit_build_info. Linux only; on a read failure
// the family is left out.
//
// Thread safety: stateless.
#ifndef RINGLIMIT_NODE_METRICS_PROCESS_METRICS_H_
#define RINGLIMIT_NODE_METRICS_PROCESS_METRICS_H_

#include <string>

namespace ringlimit::node {

// Appends the families above in the Prometheus text format.
void AppendProcessMetrics(std::string* out);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_METRICS_PROCESS_METRICS_H_
