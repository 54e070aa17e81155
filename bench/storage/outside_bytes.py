#!/usr/bin/env python3
"""Bytes per key of a running ringlimitd, measured from outside (issue 39).

One ringlimitd (default flags, memory only, loopback ports picked by the kernel) is started per algorithm;
N keys of 16 bytes are checked once each by POST /v1/check of 1000 checks (limit 10 per hour); the
daemon's resident set (/proc/PID/status VmRSS) and `ringlimit_state_bytes` (/metrics) are read after a
warm-up batch and after the N keys. Printed per algorithm: both deltas per key and their ratio.
key_bytes_bench measures the memory tier alone; this is what an operator sees.

  bench/storage/outside_bytes.py                       # 1 M keys, the five packing algorithms
  bench/storage/outside_bytes.py --keys 300000 --algorithms token_bucket,sliding_log
  RINGLIMITD=build/release/node/server/ringlimitd bench/storage/outside_bytes.py
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKING = "token_bucket,gcra,fixed_window,leaky_bucket,anchored_window"


def start(binary, directory):
    port_file = os.path.join(directory, "port.json")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0",
                             "--port-file", port_file], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(port_file) as f:
                return proc, json.load(f)["http"]
        except (OSError, ValueError, KeyError):
            if proc.poll() is not None:
                sys.exit(f"ringlimitd exited with {proc.returncode}")
            time.sleep(0.05)
    proc.kill()
    sys.exit("ringlimitd wrote no port file within 30 s")


def measure(binary, algorithm, keys):
    with tempfile.TemporaryDirectory() as directory:
        proc, port = start(binary, directory)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

            def rss():
                with open(f"/proc/{proc.pid}/status") as f:
                    return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) * 1024

            def state_bytes():
                conn.request("GET", "/metrics")
                body = conn.getresponse().read().decode()
                return float(re.search(r"^ringlimit_state_bytes(?:\{[^}]*\})? (\S+)", body, re.M).group(1))

            def check(first, last):
                checks = [{"key": f"k{i:015d}", "name": "n", "algorithm": algorithm, "limit": 10,
                           "window_ms": 3600000, "cost": 1} for i in range(first, last)]
                conn.request("POST", "/v1/check", json.dumps({"checks": checks}),
                             {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    sys.exit(f"POST /v1/check answered {response.status}")

            check(0, 1000)  # warm-up: the limit's slot, the allocator's arenas
            rss0, bytes0 = rss(), state_bytes()
            for first in range(1000, keys + 1000, 1000):
                check(first, min(first + 1000, keys + 1000))
            rss1, bytes1 = rss(), state_bytes()
        finally:
            proc.terminate()
            proc.wait()
    return (rss1 - rss0) / keys, (bytes1 - bytes0) / keys


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--algorithms", default=PACKING)
    args = parser.parse_args()
    build = os.environ.get("RINGLIMIT_BUILD_DIR", os.path.join(ROOT, "build", "release"))
    binary = os.environ.get("RINGLIMITD", os.path.join(build, "node", "server", "ringlimitd"))
    print(f"{args.keys} keys of 16 bytes, one check each, through one ringlimitd ({binary})")
    print(f"{'algorithm':<22} {'RSS B/key':>10} {'state_bytes B/key':>18} {'accounted/RSS':>14}")
    for algorithm in args.algorithms.split(","):
        rss, accounted = measure(binary, algorithm, args.keys)
        print(f"{algorithm:<22} {rss:>10.1f} {accounted:>18.1f} {accounted / rss:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
