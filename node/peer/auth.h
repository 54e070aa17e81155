// The cluster-secret handshake's cryptography: CSPRNG nonces and HMAC-SHA256 proofs (OpenSSL), and a
// constant-time comparison. No hand-written cryptography.
//
// Thread safety: free functions, safe to call from any thread.
#ifndef RINGLIMIT_NODE_PEER_AUTH_H_
#define RINGLIMIT_NODE_PEER_AUTH_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace ringlimit::peer::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;  // SHA-256
inline constexpr std::string_view kClientLabel = "ringlimit-peer-v1 client";
inline constexpr std::string_view kServerLabel = "ringlimit-peer-v1 server";

// kNonceBytes from OpenSSL's CSPRNG. Aborts if the CSPRNG fails (no safe fallback exists).
[[nodiscard]] std::string RandomNonce();

// HMAC-SHA256(secret, label || server_nonce || client_nonce), kMacBytes long.
[[nodiscard]] std::string Proof(std::string_view secret, std::string_view label,
                                std::string_view server_nonce, std::string_view client_nonce);

// True when `mac` equals the expected proof; the comparison takes the same time wherever they differ.
[[nodiscard]] bool VerifyProof(std::string_view mac, std::string_view secret, std::string_view label,
                               std::string_view server_nonce, std::string_view client_nonce);

}  // namespace ringlimit::peer::auth

#endif  // RINGLIMIT_NODE_PEER_AUTH_H_
