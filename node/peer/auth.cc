#include "node/peer/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace ringlimit::peer::auth {

std::string RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    spdlog::critical("peer: OpenSSL RAND_bytes failed; cannot create handshake nonces");
    std::abort();
  }
  return nonce;
}

std::string Proof(std::string_view secret, std::string_view label, std::string_view server_nonce,
                  std::string_view client_nonce) {
  std::string message;
  message.reserve(label.size() + server_nonce.size() + client_nonce.size());
  message.append(label).append(server_nonce).append(client_nonce);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &mac_len) == nullptr) {
    spdlog::critical("peer: OpenSSL HMAC failed");
    std::abort();
  }
  return std::string(reinterpret_cast<const char*>(mac), mac_len);
}

bool VerifyProof(std::string_view mac, std::string_view secret, std::string_view label,
                 std::string_view server_nonce, std::string_view client_nonce) {
  const std::string expected = Proof(secret, label, server_nonce, client_nonce);
  // The length is public (always kMacBytes); only the contents are compared in constant time.
  return mac.size() == expected.size() && CRYPTO_memcmp(mac.data(), expected.data(), expected.size()) == 0;
}

}  // namespace ringlimit::peer::auth
