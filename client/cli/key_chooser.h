// KeyChooser: picks key indexes in [0, keys) uniformly or Zipf-distributed, for the load generator.
//
// Zipf(s): P(rank i) proportional to 1 / (i+1)^s, sampled by binary search over a precomputed CDF
// (8 bytes per key). Index 0 is the hottest key.
//
// Thread safety: immutable after construction; Next() takes the caller's random engine, so threads
// share one chooser and keep their own engines.
#ifndef RINGLIMIT_CLIENT_CLI_KEY_CHOOSER_H_
#define RINGLIMIT_CLIENT_CLI_KEY_CHOOSER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "client/cli/parse.h"

namespace ringlimit::cli {

class KeyChooser {
 public:
  // REQUIRES: keys >= 1; zipf_s > 0 for kZipf.
  KeyChooser(uint64_t keys, KeyDistribution distribution, double zipf_s);

  [[nodiscard]] uint64_t Next(std::mt19937_64& rng) const;
  [[nodiscard]] uint64_t keys() const { return keys_; }

 private:
  uint64_t keys_;
  KeyDistribution distribution_;
  std::vector<double> cdf_;  // kZipf only; cdf_.back() == 1
};

}  // namespace ringlimit::cli

#endif  // RINGLIMIT_CLIENT_CLI_KEY_CHOOSER_H_
