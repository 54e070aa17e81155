#include "node/peer/auth.h"

#include <gtest/gtest.h>

#include <string>

namespace ringlimit::peer::auth {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

TEST(AuthTest, ProofIsHmacSha256OfTheConcatenation) {
  // RFC 4231 test case 2, with the message split across label and nonces.
  EXPECT_EQ(Hex(Proof("Jefe", "what do ya ", "want for ", "nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(AuthTest, VerifyAcceptsOnlyTheRightProof) {
  const std::string server = RandomNonce(), client = RandomNonce();
  const std::string mac = Proof("s3cret", kClientLabel, server, client);
  EXPECT_EQ(mac.size(), kMacBytes);
  EXPECT_TRUE(VerifyProof(mac, "s3cret", kClientLabel, server, client));
  EXPECT_FALSE(VerifyProof(mac, "s3cre7", kClientLabel, server, client));
  EXPECT_FALSE(VerifyProof(mac, "s3cret", kServerLabel, server, client));  // no reflection across roles
  EXPECT_FALSE(VerifyProof(mac, "s3cret", kClientLabel, client, server));
  EXPECT_FALSE(VerifyProof(mac.substr(0, 31), "s3cret", kClientLabel, server, client));
  EXPECT_FALSE(VerifyProof("", "s3cret", kClientLabel, server, client));
  std::string flipped = mac;
  flipped[31] ^= 1;
  EXPECT_FALSE(VerifyProof(flipped, "s3cret", kClientLabel, server, client));
}

TEST(AuthTest, NoncesAreRandom) {
  const std::string a = RandomNonce(), b = RandomNonce();
  EXPECT_EQ(a.size(), kNonceBytes);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace ringlimit::peer::auth
