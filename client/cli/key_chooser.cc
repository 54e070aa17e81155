#include "client/cli/key_chooser.h"

#include <algorithm>
#include <cmath>

namespace ringlimit::cli {

KeyChooser::KeyChooser(uint64_t keys, KeyDistribution distribution, double zipf_s)
    : keys_(keys < 1 ? 1 : keys), distribution_(distribution) {
  if (distribution_ != KeyDistribution::kZipf) return;
  cdf_.resize(keys_);
  double sum = 0;
  for (uint64_t i = 0; i < keys_; ++i) {
    sum += 1.0 / std::pow(static_cast<double>(i + 1), zipf_s);
    cdf_[i] = sum;
  }
  for (double& c : cdf_) c /= sum;
  cdf_.back() = 1.0;
}

uint64_t KeyChooser::Next(std::mt19937_64& rng) const {
  if (distribution_ == KeyDistribution::kUniform) {
    return std::uniform_int_distribution<uint64_t>(0, keys_ - 1)(rng);
  }
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  return static_cast<uint64_t>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin()) %
         keys_;  // u < 1 always lands inside
}

}  // namespace ringlimit::cli
