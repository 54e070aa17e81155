#include "bench/cluster/chart.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <string_view>

namespace ringlimit::bench {
namespace {

namespace fs = std::filesystem;

// `text` as a single-quoted gnuplot string (no escapes inside; a quote is doubled).
std::string GnuplotQuote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

// `text` inside a double-quoted gnuplot string (where \n and the like are escapes).
std::string GnuplotEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The gnuplot script that draws `bars` into `svg`.
std::string ChartScript(const fs::path& svg, const std::string& title, const std::string& measure,
                        const std::vector<ChartBar>& bars) {
  double top = 1;
  bool any_target = false;
  for (const ChartBar& bar : bars) {
    top = std::max(top, bar.ratio);
    if (bar.target) {
      top = std::max(top, *bar.target);
      any_target = true;
    }
  }
  std::ostringstream script;
  script << "set terminal svg size 860,460 dynamic background rgb 'white' font 'sans,12'\n"
         << "set output " << GnuplotQuote(svg.string()) << "\n"
         << "set title " << GnuplotQuote(title) << " noenhanced\n"
         << "set ylabel " << GnuplotQuote(measure + " per check, ratio to the single node") << " noenhanced\n"
         << "set xrange [-0.6:" << bars.size() - 0.4 << "]\n"
         << "set yrange [0:" << top * 1.35 << "]\n"
         << "set style fill solid 0.7 border -1\n"
         << "set boxwidth 0.6\n"
         << "set grid ytics\n"
         << "set key top left noenhanced\n"
         << "set xtics noenhanced\n"
         << "set datafile missing '-'\n";
  // Above each bar: its ratio, then its figures, one per line (the first line at the offset, the rest below).
  for (size_t i = 0; i < bars.size(); ++i) {
    std::ostringstream text;
    text << std::fixed << std::setprecision(2) << bars[i].ratio << "x";
    for (const std::string& figure : bars[i].figures) text << "\\n" << GnuplotEscape(figure);
    script << "set label " << i + 1 << " \"" << text.str() << "\" at " << i << "," << bars[i].ratio
           << " center noenhanced offset 0," << bars[i].figures.size() + 1 << "\n";
  }
  // phase, ratio, target ratio ('-': none)
  script << "$bars << EOD\n";
  for (const ChartBar& bar : bars) {
    script << '"' << bar.phase << "\" " << bar.ratio << " ";
    if (bar.target) {
      script << *bar.target << "\n";
    } else {
      script << "-\n";
    }
  }
  script << "EOD\n"
         << "plot $bars using 0:2:xtic(1) with boxes lc rgb '#4a7ab5' title 'per check, ratio to single'";
  if (any_target) {
    script << ", \\\n     $bars using 0:3:(0.36) with xerrorbars pt 0 lw 2 lc rgb '#c03030' "
              "title 'issue 33 target'";
  }
  script << "\n";
  return script.str();
}

}  // namespace

std::optional<fs::path> FindGnuplot() {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path == nullptr ? "/usr/bin:/bin" : path;
  while (!dirs.empty()) {
    const size_t colon = std::min(dirs.find(':'), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(0, colon)) / "gnuplot";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    dirs.remove_prefix(std::min(colon + 1, dirs.size()));
  }
  return std::nullopt;
}

testing::Result<void> WriteChart(const fs::path& gnuplot, const fs::path& svg, const std::string& title,
                                 const std::string& measure, const std::vector<ChartBar>& bars) {
  const fs::path script_file = svg.string() + ".gp";
  {
    std::ofstream out(script_file);
    out << ChartScript(svg, title, measure, bars);
    if (!out) return "cannot write " + script_file.string();
  }
  std::string program = gnuplot.string();
  std::string script_arg = script_file.string();
  char* argv[] = {program.data(), script_arg.data(), nullptr};
  pid_t child = -1;
  const int spawned = posix_spawn(&child, program.c_str(), nullptr, nullptr, argv, environ);
  int status = 0;
  if (spawned == 0) {
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
  }
  std::error_code ignored;
  fs::remove(script_file, ignored);
  if (spawned != 0) return gnuplot.string() + ": " + std::strerror(spawned);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return gnuplot.string() + " failed on " + svg.string();
  return {};
}

}  // namespace ringlimit::bench
