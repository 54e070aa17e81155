#!/usr/bin/env bash
# TLS on the HTTP API and the gRPC port (--tls-cert / --tls-key), from outside as a user runs it: a
# certificate authority and a server certificate made with openssl, a node started with them, then curl
# (checks over https, verified against the CA; plain HTTP refused) and Debian's python3-grpcio
# (/usr/bin/python3: Gubernator HealthCheck over TLS; a plaintext channel fails). Then the peer port over
# mutual TLS: two nodes form a cluster and forward checks; one without a certificate cannot join. Bad TLS
# flags stop a node at start with a message.
#
#   RINGLIMITD=build/release/node/server/ringlimitd tests/scripts/tls_test.sh
set -euo pipefail

[[ -x "${RINGLIMITD:-}" ]] || { echo "FAIL: set RINGLIMITD to the ringlimitd binary" >&2; exit 1; }
for tool in curl jq openssl /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/bootstrap installs it)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-tls-test-XXXXXX")
pid=""
cleanup() {
  local rc=$?
  [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null || true
  if ((rc != 0)); then
    echo "--- node log" >&2
    cat "$work/node.log" >&2 2>/dev/null || true
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A CA and a certificate for 127.0.0.1 / localhost signed by it.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ringlimit test CA" \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$work/node.key" -out "$work/node.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/san.ext"
openssl x509 -req -in "$work/node.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/san.ext" -out "$work/node.pem" 2>/dev/null

# Bad flags: a missing key, an unreadable certificate.
if "$RINGLIMITD" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --tls-cert "$work/node.pem" >"$work/bad.log" 2>&1; then
  fail "a node started with --tls-cert and no --tls-key"
fi
grep -q -- "give both --tls-cert and --tls-key" "$work/bad.log" || fail "no message for a missing --tls-key: $(cat "$work/bad.log")"
if "$RINGLIMITD" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --tls-cert "$work/missing.pem" \
  --tls-key "$work/node.key" >"$work/bad.log" 2>&1; then
  fail "a node started with a certificate file that does not exist"
fi

"$RINGLIMITD" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 \
  --tls-cert "$work/node.pem" --tls-key "$work/node.key" --port-file "$work/ports.json" >"$work/node.log" 2>&1 &
pid=$!
https() { curl -sS --max-time 5 --cacert "$work/ca.pem" "$@"; }
deadline=$((SECONDS + 30))
until [[ -s "$work/ports.json" ]] && https -o /dev/null "https://127.0.0.1:$(jq -r .http "$work/ports.json")/readyz" 2>/dev/null; do
  kill -0 "$pid" 2>/dev/null || fail "the node exited"
  ((SECONDS < deadline)) || fail "the node did not become ready over https within 30 s"
  sleep 0.1
done
port=$(jq -r .http "$work/ports.json")
grpc_port=$(jq -r .grpc_port "$work/ports.json")

# Checks over https, keep-alive across requests on one connection: the limit holds.
out=$(https "https://127.0.0.1:$port/v1/check?key=tls&limit=2&window_ms=60000" \
  "https://127.0.0.1:$port/v1/check?key=tls&limit=2&window_ms=60000" \
  "https://127.0.0.1:$port/v1/check?key=tls&limit=2&window_ms=60000" -o /dev/null -o /dev/null -o /dev/null \
  -w '%{http_code} %{num_connects}\n')
[[ "$out" == $'200 1\n200 0\n429 0' ]] || fail "three checks over one https connection: got $(printf '%q' "$out")"
body=$(https -H 'Content-Type: application/json' -d '{"checks":[{"key":"tls-post","limit":5,"window_ms":60000}]}' \
  "https://127.0.0.1:$port/v1/check")
[[ $(jq -r .results[0].remaining <<<"$body") == 4 ]] || fail "POST over https: $body"
# An untrusted certificate is refused by a verifying client; plain HTTP gets no HTTP answer.
if curl -sS --max-time 5 -o /dev/null "https://127.0.0.1:$port/healthz" 2>/dev/null; then
  fail "curl trusted the test certificate without --cacert"
fi
code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/healthz" || true)
[[ "$code" == "000" ]] || fail "plain HTTP on the TLS port answered $code"
# The node still serves after those.
https -o /dev/null "https://127.0.0.1:$port/healthz" || fail "the node stopped serving https"

# A connection the node closes (Connection: close, and a 400 that closes it) ends with TLS close_notify, not
# a bare TCP close: Python's ssl, told not to ignore an unexpected EOF, raises on a close without it.
/usr/bin/python3 - "$port" "$work/ca.pem" <<'PY' 2>"$work/close.err" || fail "TLS close: $(tail -5 "$work/close.err")"
import socket, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
context = ssl.create_default_context(cafile=ca)
context.options &= ~ssl.OP_IGNORE_UNEXPECTED_EOF  # set by default since Python 3.10
for request, status in ((b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b" 200 "),
                        (b"GET /v1/check?limit=-1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b" 400 ")):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False) as tls:
            tls.sendall(request)
            answer = b""
            while True:
                chunk = tls.recv(65536)  # raises SSLEOFError on a TCP close without close_notify
                if not chunk:
                    break
                answer += chunk
            assert status in answer.split(b"\r\n", 1)[0], answer[:200]
PY

# gRPC over TLS: Gubernator's HealthCheck (an empty request) answers; a plaintext channel does not.
/usr/bin/python3 - "$grpc_port" "$work/ca.pem" <<'PY' 2>"$work/grpc.err" || fail "gRPC over TLS: $(tail -5 "$work/grpc.err")"
import sys, grpc
port, ca = sys.argv[1], open(sys.argv[2], "rb").read()
method = "/pb.gubernator.V1/HealthCheck"
secure = grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(root_certificates=ca))
reply = secure.unary_unary(method)(b"", timeout=10)
assert b"healthy" in reply, reply
plain = grpc.insecure_channel(f"127.0.0.1:{port}")
try:
    plain.unary_unary(method)(b"", timeout=3)
    raise SystemExit("a plaintext gRPC call succeeded on the TLS port")
except grpc.RpcError as e:
    assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), e.code()
PY

kill -TERM "$pid"
wait "$pid" || fail "the node did not exit cleanly on SIGTERM"
pid=""

# The peer port over mutual TLS: two nodes with certificates from the CA form a cluster and forward checks to
# each other; a node without a certificate cannot join them (its TLS handshake is refused).
peer_tls=(--peer-tls-cert "$work/node.pem" --peer-tls-key "$work/node.key" --peer-tls-ca "$work/ca.pem")
if "$RINGLIMITD" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --peer-tls-cert "$work/node.pem" \
  --peer-tls-key "$work/node.key" >"$work/bad.log" 2>&1; then
  fail "a node started with --peer-tls-cert and no --peer-tls-ca"
fi
grep -q -- "give all of --peer-tls-cert, --peer-tls-key and --peer-tls-ca" "$work/bad.log" ||
  fail "no message for a missing --peer-tls-ca: $(cat "$work/bad.log")"
pids=()
start_node() {  # NAME [FLAGS...]: starts a node writing $work/NAME.ports.json
  local name=$1
  shift
  "$RINGLIMITD" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --node-id "$name" --port-file "$work/$name.ports.json" \
    "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
}
wait_ports() {
  local deadline=$((SECONDS + 30))
  until [[ -s "$work/$1.ports.json" ]]; do
    ((SECONDS < deadline)) || fail "$1 wrote no port file"
    sleep 0.1
  done
}
cleanup_cluster() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; }
trap 'cleanup_cluster; cleanup' EXIT
start_node a "${peer_tls[@]}"
wait_ports a
a_peer=$(jq -r .peer_port "$work/a.ports.json")
start_node b "${peer_tls[@]}" --join "127.0.0.1:$a_peer"
start_node plain --join "127.0.0.1:$a_peer"
wait_ports b
wait_ports plain
b_http=$(jq -r .http "$work/b.ports.json")
plain_http=$(jq -r .http "$work/plain.ports.json")
deadline=$((SECONDS + 30))
until [[ $(curl -s "http://127.0.0.1:$b_http/v1/cluster" | jq '[.members[] | select(.state == "alive")] | length' 2>/dev/null) == 2 ]]; do
  ((SECONDS < deadline)) || fail "b did not see a and b alive over the TLS peer port: $(curl -s "http://127.0.0.1:$b_http/v1/cluster")"
  sleep 0.1
done
# Checks of keys a owns are forwarded to it over TLS and decided there.
checks=$(jq -nc '{checks: [range(0; 40) | {key: ("k\(.)"), limit: 5, window_ms: 60000}]}')
body=$(curl -s -H 'Content-Type: application/json' -d "$checks" "http://127.0.0.1:$b_http/v1/check")
[[ $(jq '[.results[] | select(.allowed and .owner == "a")] | length' <<<"$body") -gt 0 ]] ||
  fail "no check was decided by a through the TLS peer port: $body"
[[ $(jq '[.results[] | select(.allowed | not)] | length' <<<"$body") == 0 ]] || fail "a check was refused: $body"
# The node without a certificate never joins: a refuses its handshake, it is not ready, the others do not list it.
deadline=$((SECONDS + 15))
until grep -q "peer: TLS handshake failed" "$work/a.log"; do
  ((SECONDS < deadline)) || fail "a logged no refused TLS handshake from the node without a certificate"
  sleep 0.1
done
[[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$plain_http/readyz") != 200 ]] ||
  fail "a node without a peer certificate joined the TLS cluster"
[[ $(curl -s "http://127.0.0.1:$b_http/v1/cluster" | jq '[.members[] | select(.id == "plain")] | length') == 0 ]] ||
  fail "the TLS cluster lists the node without a certificate"
echo "PASS: TLS on the HTTP API, gRPC and the peer port"
