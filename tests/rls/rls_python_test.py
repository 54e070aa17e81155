#!/usr/bin/python3
"""A second, independent client of ringlimitd's Envoy rate limit service: Debian's python3-grpcio.

Usage: rls_python_test.py RINGLIMITD PYTHON_PROTO_DIR

Starts one ringlimitd with --grpc-listen and --rls-config, then calls ShouldRateLimit twice over:
with a request encoded by hand from Envoy's field numbers (independent of ringlimit's .proto copies),
and with the Python classes protoc generated from them. Exits 0 when every check holds.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import grpc

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
CONFIG = """domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
"""


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, payload):
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def hand_encoded_request(domain, entries, hits_addend):
    # RateLimitRequest: domain = 1, descriptors = 2, hits_addend = 3 (varint).
    # RateLimitDescriptor: entries = 1; Entry: key = 1, value = 2.
    descriptor = b"".join(field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in entries)
    return field(1, domain.encode()) + field(2, descriptor) + varint(3 << 3 | 0) + varint(hits_addend)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    ringlimitd, proto_dir = sys.argv[1], sys.argv[2]
    sys.path.insert(0, proto_dir)
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402 (generated at build time)

    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "rls.yaml")
        with open(config, "w") as f:
            f.write(CONFIG)
        port_file = os.path.join(tmp, "ports.json")
        log = open(os.path.join(tmp, "log"), "w")
        node = subprocess.Popen(
            [ringlimitd, "--listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0", "--grpc-listen",
             "127.0.0.1:0", "--rls-config", config, "--port-file", port_file, "--threads", "1"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 20
            while not os.path.exists(port_file):
                check(node.poll() is None, "ringlimitd exited early")
                check(time.monotonic() < deadline, "no port file within 20 s")
                time.sleep(0.01)  # polling the file with a deadline
            with open(port_file) as f:
                port = json.load(f)["grpc_port"]
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(channel).result(timeout=10)

            raw = channel.unary_unary(METHOD, request_serializer=None,
                                      response_deserializer=rls_pb2.RateLimitResponse.FromString)
            codes = []
            for _ in range(4):
                response = raw(hand_encoded_request("edge", [("remote_address", "198.51.100.1")], 1),
                               timeout=10)
                codes.append(response.overall_code)
                status = response.statuses[0]
                check(status.current_limit.requests_per_unit == 3, f"current_limit: {status}")
                check(status.current_limit.unit == rls_pb2.RateLimitResponse.RateLimit.HOUR, f"unit: {status}")
            ok, over = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT
            check(codes == [ok, ok, ok, over], f"codes {codes}")

            typed = channel.unary_unary(METHOD, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                        response_deserializer=rls_pb2.RateLimitResponse.FromString)
            request = rls_pb2.RateLimitRequest(domain="edge", hits_addend=2)
            entry = request.descriptors.add().entries.add()
            entry.key, entry.value = "remote_address", "198.51.100.2"
            response = typed(request, timeout=10)
            check(response.overall_code == ok and response.statuses[0].limit_remaining == 1, f"{response}")
            request.domain = "unknown"
            check(typed(request, timeout=10).overall_code == ok, "unknown domain")
            request.domain = ""
            try:
                typed(request, timeout=10)
                check(False, "an empty domain was accepted")
            except grpc.RpcError as e:
                check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"empty domain: {e.code()}")
            print("rls_python_test: ok")
        finally:
            node.terminate()
            node.wait(timeout=20)
            log.close()


if __name__ == "__main__":
    main()
