#!/usr/bin/env bash
# The Debian package as a user gets it: cpack -G DEB in the build directory, the .deb extracted into a
# scratch root (dpkg-deb -x: what `apt install ./ringlimit_*.deb` puts on disk), then the installed
# ringlimitd run with the installed config and policies, and the installed CLI asked through it.
# Env: BUILD_DIR (the CMake build directory).
set -euo pipefail
: "${BUILD_DIR:?}"
work=$(mktemp -d)
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

(cd "$BUILD_DIR" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(ls "$work"/out/ringlimit_*.deb)
[[ -f "$deb" ]] || fail "no .deb in $work/out"
dpkg-deb -f "$deb" Depends | grep -q "libgrpc++" || fail "Depends lacks the shared libraries: $(dpkg-deb -f "$deb" Depends)"
root="$work/root"
dpkg-deb -x "$deb" "$root"
for f in usr/bin/ringlimitd usr/bin/ringlimit etc/ringlimit/ringlimitd.conf etc/ringlimit/policies.json \
         usr/lib/systemd/system/ringlimitd.service usr/share/doc/ringlimit/examples/nginx/ringlimit.conf; do
  [[ -e "$root/$f" ]] || fail "the package lacks /$f"
done
unit="$root/usr/lib/systemd/system/ringlimitd.service"
for line in DynamicUser=yes StateDirectory=ringlimit ProtectSystem=strict LimitNOFILE= NoNewPrivileges=yes \
            "ExecStart=/usr/bin/ringlimitd --config /etc/ringlimit/ringlimitd.conf"; do
  grep -q -- "$line" "$unit" || fail "the unit lacks $line"
done
"$root/usr/bin/ringlimitd" --version | grep -q '^ringlimitd [0-9]' || fail "ringlimitd --version"
"$root/usr/bin/ringlimit" --version | grep -q '^ringlimit [0-9]' || fail "ringlimit --version"

# The installed daemon with the installed config (its ports made ephemeral, its policies path pointed
# into the scratch root: the command line wins over the file).
"$root/usr/bin/ringlimitd" --config "$root/etc/ringlimit/ringlimitd.conf" --listen 127.0.0.1:0 \
  --peer-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --policies "$root/etc/ringlimit/policies.json" \
  --data-dir "$work/data" --port-file "$work/port.json" >"$work/node.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  [[ -s "$work/port.json" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/node.log"; fail "the installed ringlimitd exited"; }
  sleep 0.05
done
port=$(jq -r .http "$work/port.json")
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break
  sleep 0.05
done
curl -sf "http://127.0.0.1:$port/v1/check?key=pkg&policy=api" | jq -e '.allowed == true' >/dev/null ||
  fail "a check against the installed policies"
RINGLIMIT_NODE="127.0.0.1:$port" "$root/usr/bin/ringlimit" check pkg-cli --limit 3 --window 60s >/dev/null ||
  fail "the installed CLI"
echo "package_test: ok ($(basename "$deb"), $(du -h "$deb" | cut -f1))"
