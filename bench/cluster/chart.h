// cluster_bench --chart: a bar chart of the cost per check of each phase, as its ratio to the single node's,
// drawn by gnuplot (Debian's gnuplot-nox, installed by scripts/bootstrap) into an SVG file.
//
// Thread safety: none needed; WriteChart runs gnuplot and waits for it.
#ifndef RINGLIMIT_BENCH_CLUSTER_CHART_H_
#define RINGLIMIT_BENCH_CLUSTER_CHART_H_

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/node_process.h"

namespace ringlimit::bench {

// One bar: a phase's cost per check as its ratio to the single node's, with its figures.
struct ChartBar {
  std::string phase;
  std::vector<std::string> figures;  // printed above the bar under its ratio, one per line (e.g. "84.0 k Ir")
  double ratio = 0;                  // cost / the single node's cost
  std::optional<double> target;      // the ratio issue 33 targets for this phase, drawn as a marker
};

// The gnuplot on PATH, or nullopt if there is none.
[[nodiscard]] std::optional<std::filesystem::path> FindGnuplot();

// Draws `bars` under `title` (one line, e.g. the command and commit) into `svg` with `gnuplot`.
// Fails if gnuplot fails.
[[nodiscard]] testing::Result<void> WriteChart(const std::filesystem::path& gnuplot,
                                               const std::filesystem::path& svg, const std::string& title,
                                               const std::string& measure, const std::vector<ChartBar>& bars);

}  // namespace ringlimit::bench

#endif  // RINGLIMIT_BENCH_CLUSTER_CHART_H_
