#!/usr/bin/env python3
"""Writes the hand-written seed inputs of every fuzz target into fuzz/corpus/<target>/seed-*.

Run from anywhere: python3 fuzz/make_seeds.py. It rewrites the seed-* files only (crash-* files, the
regression inputs, are kept). Protobuf inputs are written in text format and encoded with protoc, so each
seed says what it is; the merged states are packed by hand (layout in limiter/merge_codec.cc).
"""
import os
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def clear(target):
    d = os.path.join(CORPUS, target)
    if os.path.isdir(d):
        for f in os.listdir(d):
            if f.startswith("seed-"):
                os.remove(os.path.join(d, f))


def encode(message_type, text):
    proto = {"ringlimit.transport": "transport.proto", "ringlimit.peer": "peer.proto",
             "ringlimit.state": "state.proto",
             "envoy.service.ratelimit.v3": "envoy/service/ratelimit/v3/rls.proto"}[message_type.rsplit(".", 1)[0]]
    return subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--encode=" + message_type, proto],
                          input=text.encode(), capture_output=True, check=True).stdout


# ------------------------------------------------------------------------------------------ merged states
def merge_state(algorithm, newest=0, base=(0, 0, 0, 0), included=(), contributions=()):
    out = struct.pack("<BB", 1, algorithm)
    if algorithm == 0:
        return out
    out += struct.pack("<qQqqqI", newest, base[0], base[1], base[2], base[3], len(included))
    for e in included:
        out += struct.pack("<QQQQq", *e)
    out += struct.pack("<I", len(contributions))
    for c in contributions:
        out += struct.pack("<QQ", c[0], c[1])
        if algorithm in (1, 3, 4):  # window counters: width, cells
            out += struct.pack("<qI", c[2], len(c[3]))
            for index, count in c[3]:
                out += struct.pack("<qQ", index, count)
        elif algorithm == 2:  # sliding_log: stamps
            out += struct.pack("<I", len(c[2]))
            for t in c[2]:
                out += struct.pack("<q", t)
        else:  # buckets: epoch, consumed, last
            out += struct.pack("<QQq", c[2], c[3], c[4])
    return out


T0 = 1_700_000_000_000_000_000
SEC = 1_000_000_000
MERGE_SEEDS = {
    "empty": merge_state(0),
    "fixed_window": merge_state(1, T0, contributions=[(7, 3, SEC, [(T0 // SEC, 4)])]),
    "fixed_window_two": merge_state(1, T0, contributions=[(7, 3, SEC, [(T0 // SEC, 4)]),
                                                           (9, 5, SEC, [(T0 // SEC - 1, 2), (T0 // SEC, 1)])]),
    "sliding_log": merge_state(2, T0, contributions=[(7, 2, [T0 - 5 * SEC, T0 - SEC, T0])]),
    "sliding_window": merge_state(3, T0, contributions=[(7, 4, SEC // 10, [(i, i + 1) for i in range(5)])]),
    "sliding_window_approx": merge_state(4, T0, contributions=[(3, 1, SEC, [(5, 1), (6, 9)])]),
    "token_bucket": merge_state(5, T0, base=(2, 3, 0, T0 - SEC),
                                included=[(7, 1, 1, 2, T0 + SEC)], contributions=[(7, 2, 1, 4, T0)]),
    "leaky_bucket": merge_state(6, T0, base=(1, 5, 12345, T0), contributions=[(11, 9, 1, 1, T0)]),
    "gcra": merge_state(7, T0, contributions=[(1 << 63, 1 << 40, 3, 7, T0)]),
    "extremes": merge_state(5, -(1 << 63), base=((1 << 64) - 1, (1 << 63) - 1, 0, (1 << 63) - 1),
                            contributions=[((1 << 64) - 1, (1 << 64) - 1, (1 << 64) - 1, (1 << 64) - 1,
                                            -(1 << 63))]),
    "truncated": merge_state(3, T0, contributions=[(7, 4, SEC // 10, [(1, 1)])])[:-3],
    "unsorted": merge_state(6, T0, contributions=[(9, 1, 1, 1, T0), (7, 1, 1, 1, T0)]),
    "trailing": merge_state(0) + b"\x00",
}

# ------------------------------------------------------------------------------------------ grant ledgers
def grant_ledger(floor, records):
    out = struct.pack("<BqI", 1, floor, len(records))
    for r in records:  # id, granted, used, returned, at, settled
        out += struct.pack("<QQQQqB", *r)
    return out


LEDGER_SEEDS = {
    "empty": grant_ledger(-(1 << 63), []),
    "outstanding": grant_ledger(-(1 << 63), [(1 << 32 | 1, 100, 0, 0, T0, 0), (1 << 32 | 2, 40, 0, 0, T0, 0)]),
    "settled": grant_ledger(T0 - SEC, [(1 << 32 | 1, 100, 37, 63, T0, 1), (2 << 32 | 9, 8, 8, 0, T0 + SEC, 1)]),
    "extremes": grant_ledger(-(1 << 63), [((1 << 64) - 1, (1 << 64) - 1, (1 << 64) - 1, (1 << 64) - 1,
                                            (1 << 63) - 1, 0)]),
    "unsorted": grant_ledger(0, [(5, 1, 0, 0, T0, 0), (3, 1, 0, 0, T0, 0)]),
    "below_floor": grant_ledger(T0, [(5, 1, 0, 0, T0 - 1, 0)]),
    "truncated": grant_ledger(0, [(5, 1, 0, 0, T0, 0)])[:-2],
}

# ------------------------------------------------------------------------------------------ stored states
SPECS = {
    "token_bucket": "algorithm: ALGORITHM_TOKEN_BUCKET limit: 10 window_ns: 60000000000 burst: 10",
    "sliding_window": "algorithm: ALGORITHM_SLIDING_WINDOW limit: 500 window_ns: 3600000000000 buckets: 60",
    "sliding_log": "algorithm: ALGORITHM_SLIDING_LOG limit: 3 window_ns: 1000000000",
    "fixed_window": "algorithm: ALGORITHM_FIXED_WINDOW limit: 4 window_ns: 1000000000 mode: MODE_SOFT soft_pct: 50",
    "gcra": "algorithm: ALGORITHM_GCRA limit: 5 window_ns: 60000000000 burst: 2 count_denied: true",
    "leaky_bucket": "algorithm: ALGORITHM_LEAKY_BUCKET limit: 5 window_ns: 1000000000 max_delay_ns: 2000000000",
    "approx_dynamic": ("algorithm: ALGORITHM_SLIDING_WINDOW_APPROX limit: 4 window_ns: 1000000000 "
                       "mode: MODE_DYNAMIC dynamic_limit: 8"),
}
ALGO_NUMBER = {"fixed_window": 1, "sliding_log": 2, "sliding_window": 3, "approx_dynamic": 4,
               "token_bucket": 5, "leaky_bucket": 6, "gcra": 7}


def escaped(data):
    return "".join("\\%03o" % b for b in data)


def stored_state_text(spec_name, merged=True, version=3, expiry=T0 + 60 * SEC):
    algo = ALGO_NUMBER[spec_name]
    text = "spec { %s } fingerprint: 1 version: %d expiry_ns: %d " % (SPECS[spec_name], version, expiry)
    if merged:
        key = {1: "fixed_window", 2: "sliding_log", 3: "sliding_window", 4: "sliding_window_approx",
               5: "token_bucket", 6: "leaky_bucket", 7: "gcra"}[algo]
        text += "state_algorithm: %d merged: \"%s\"" % (algo, escaped(MERGE_SEEDS[key]))
    else:  # a row from before mergeable states: three words (and a tail)
        text += "state_algorithm: %d word: 4 word: %d word: 0 tail: 1 tail: 2" % (algo, T0)
    return text


def main():
    for target in ("merge_state", "grant_ledger", "stored_state", "peer_frame", "peer_message", "http_check", "check_json",
                   "check_batch_json", "gubernator_json", "policies_json"):
        clear(target)

    for name, data in MERGE_SEEDS.items():
        write("merge_state", name, data)
    for name, data in LEDGER_SEEDS.items():
        write("grant_ledger", name, data)

    for spec in SPECS:
        write("stored_state", spec, encode("ringlimit.state.StoredState", stored_state_text(spec)))
    write("stored_state", "legacy_words", encode("ringlimit.state.StoredState",
                                                 stored_state_text("token_bucket", merged=False)))
    write("stored_state", "legacy_log", encode("ringlimit.state.StoredState",
                                               stored_state_text("sliding_log", merged=False)))
    write("stored_state", "never_written", encode("ringlimit.state.StoredState",
                                                  "spec { %s } version: 1" % SPECS["gcra"]))
    write("stored_state", "invalid_spec", encode("ringlimit.state.StoredState",
                                                 "spec { algorithm: ALGORITHM_GCRA limit: 0 window_ns: 1 }"))
    write("stored_state", "empty", b"")

    # Peer messages: one byte choosing the method (peer_message_fuzz.cc), then the payload.
    member = ('updates { id: "n2" http_address: "127.0.0.1:7002" peer_address: "127.0.0.1:7102" vnodes: 64 '
              'incarnation: 5 state: MEMBER_STATE_ALIVE }')
    ping = encode("ringlimit.peer.Ping", 'seq: 1 from: "n2" from_address: "127.0.0.1:7102" full_state: true '
                  + member + ' wall_ns: %d' % T0)
    ping_req = encode("ringlimit.peer.PingReq", 'seq: 2 from: "n2" from_address: "127.0.0.1:7102" '
                      'target: "n3" target_address: "127.0.0.1:7103" ' + member)
    ack = encode("ringlimit.peer.Ack", 'seq: 1 from: "n2" from_address: "127.0.0.1:7102" target: "n2" '
                 'wall_ns: %d echo_wall_ns: %d ' % (T0, T0 - 1000) +
                 member.replace("MEMBER_STATE_ALIVE", "MEMBER_STATE_SUSPECT"))
    leave = encode("ringlimit.peer.Ping", 'seq: 3 from: "n2" from_address: "127.0.0.1:7102" '
                   + member.replace("MEMBER_STATE_ALIVE", "MEMBER_STATE_LEFT"))
    forward = encode("ringlimit.peer.ForwardCheckRequest",
                     'from: "n2" owner: "n1" ring_fingerprint: 7 checks { check_id: 1 key: "user:42" cost: 1 '
                     'hops: 1 limits { name: "per_minute" spec { %s } } limits { name: "per_hour" spec { %s } } } '
                     'checks { check_id: 2 key: "user:7" cost: 3 headroom: 0.5 limits { name: "d" cost: 2 '
                     'headroom: 1 spec { %s } reset: true } } '
                     'checks { check_id: 3 key: "" limits { name: "bad" spec { algorithm: ALGORITHM_GCRA } } }'
                     % (SPECS["token_bucket"], SPECS["sliding_window"], SPECS["approx_dynamic"]))
    answer = encode("ringlimit.peer.ForwardCheckResponse",
                    'from: "n1" results { check_id: 1 status: CHECK_OK owner: "n1" allowed: true decisions { '
                    'allowed: true limit: 10 remaining: 9 reset_after_ns: 6000000000 } } results { check_id: 2 '
                    'status: CHECK_INVALID error: "invalid spec" decisions { retry_after_ns: 9223372036854775807 '
                    'delay_ns: -1 } }')
    batch = encode("ringlimit.peer.StateUpdateBatch",
                   'from: "n2" ring_fingerprint: 9 updates { key: "user:42" token: 123 states { name: "api/per_minute" '
                   'state { %s } } states { name: "api/per_hour" state { %s } } } '
                   'updates { key: "gone" erased: true } updates { key: "old" states { name: "login" state { %s } } } '
                   'handoff: true want_newer: true'
                   % (stored_state_text("token_bucket"), stored_state_text("sliding_window"),
                      stored_state_text("gcra", merged=False)))
    for name, (choice, payload) in {"ping": (0, ping), "ping_req": (1, ping_req), "ack": (2, ack),
                                    "leave": (0, leave), "forward_check": (3, forward),
                                    "forward_answer": (4, answer), "state_batch": (5, batch),
                                    "ping_as_ack": (2, ping), "empty_forward": (3, b"")}.items():
        write("peer_message", name, bytes([choice]) + payload)

    # Peer frames: 4-byte big-endian length + transport.Frame, as a peer writes them.
    def framed(text):
        body = encode("ringlimit.transport.Frame", text)
        return struct.pack(">I", len(body)) + body

    hello_reply = framed('hello_reply { version: 1 client_nonce: "%s" client_mac: "%s" }'
                         % ("n" * 32, "m" * 32))
    request = framed('envelopes { request_id: 1 kind: KIND_REQUEST method: 10 payload: "%s" }' % escaped(forward))
    one_way = framed('envelopes { kind: KIND_ONE_WAY method: 1 payload: "%s" } '
                     'envelopes { kind: KIND_ONE_WAY method: 3 payload: "%s" }' % (escaped(ping), escaped(ack)))
    response = framed('envelopes { request_id: 1 kind: KIND_RESPONSE method: 10 status: REPLY_HANDLER_ERROR '
                      'error: "overloaded" }')
    large = framed('envelopes { request_id: 2 kind: KIND_REQUEST method: 20 payload: "%s" }'
                   % escaped(batch * 40))
    frames = {
        "handshake": hello_reply,
        "handshake_then_request": hello_reply + request,
        "session": hello_reply + request + one_way + response,
        "large_after_handshake": hello_reply + large,
        "large_before_handshake": large,
        "partial": hello_reply + request[:-5],
        "empty_frame": hello_reply + b"\x00\x00\x00\x00",
        "oversized": b"\x7f\xff\xff\xff" + b"x" * 8,
        "garbage_frame": hello_reply + b"\x00\x00\x00\x03\xff\xff\xff",
        "hello": framed('hello { version: 1 server_nonce: "%s" auth_required: true }' % ("s" * 32)),
        "hello_done": framed('hello_done { accepted: false reason: "authentication failed" }'),
        "short_header": b"\x00\x00",
    }
    for name, data in frames.items():
        write("peer_frame", name, data)

    # HTTP: what a client writes on a connection (pipelined requests allowed).
    def http(method, target, body=None, headers=()):
        lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1:7001"] + list(headers)
        if body is not None:
            lines += ["Content-Type: application/json", "Content-Length: %d" % len(body.encode())]
        return "\r\n".join(lines) + "\r\n\r\n" + (body or "")

    check_body = ('{"checks":[{"key":"user:42","name":"per_minute","algorithm":"token_bucket","limit":10,'
                  '"window_ms":60000},{"key":"user:42","name":"per_hour","algorithm":"sliding_window",'
                  '"limit":500,"window_ms":3600000}]}')
    gub_body = ('{"requests":[{"name":"requests_per_sec","unique_key":"account:12345","hits":"1","limit":"10",'
                '"duration":"1000","algorithm":"TOKEN_BUCKET","behavior":"BATCHING"}]}')
    requests = {
        "get_check": http("GET", "/v1/check?key=user:42&algorithm=token_bucket&limit=10&window_ms=60000"),
        "get_check_policy": http("GET", "/v1/check?key=user:1&policy=api&tier=gold&cost=2"),
        "get_check_header_key": http("GET", "/v1/check?policy=login&deny_status=403",
                                     headers=["X-RateLimit-Key: user%3A9"]),
        "get_check_twice": http("GET", "/v1/check?key=a&limit=1&window_ms=1000&algorithm=gcra") * 2,
        "post_check": http("POST", "/v1/check", check_body),
        "post_check_chunked": ("POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                               % (len(check_body), check_body)),
        "post_check_bad": http("POST", "/v1/check", '{"checks":[{"key":"k","limt":3}]}'),
        "post_check_text": http("POST", "/v1/check", check_body).replace("application/json", "text/plain"),
        "auth": http("GET", "/v1/auth?key=user:42&policy=api") + http("GET", "/v1/auth"),
        "gubernator": http("POST", "/v1/GetRateLimits", gub_body),
        "keys": http("GET", "/v1/keys/user:42") + http("DELETE", "/v1/keys/user:42?name=api%2Fper_minute"),
        "headroom": http("PUT", "/v1/headroom", '{"headroom":0.5,"ttl_ms":1000}'),
        "admin": http("GET", "/metrics") + http("GET", "/healthz") + http("HEAD", "/readyz") +
                 http("GET", "/v1/stats") + http("GET", "/v1/HealthCheck"),
        "cluster": http("GET", "/v1/cluster") + http("GET", "/v1/ring?key=a") + http("POST", "/v1/cluster/leave"),
        "not_found": http("OPTIONS", "/v1/check") + http("GET", "/nope?%zz"),
        "percent": http("GET", "/v1/check?key=%E2%82%AC%00&limit=3&window_ms=1000&mode=soft&soft_pct=10"),
        "http10_no_length": "POST /v1/check HTTP/1.0\r\nContent-Type: application/json\r\n\r\n" + check_body,
    }
    for name, data in requests.items():
        write("http_check", name, data)

    checks = {
        "two_limits": check_body,
        "policy": '{"checks":[{"key":"user:1","policy":"api","tier":"gold","cost":"3"}]}',
        "every_field": ('{"checks":[{"key":"k","name":"n","algorithm":"leaky_bucket","limit":5,"window_ms":1000,'
                        '"burst":5,"max_delay_ms":2000,"mode":"dynamic","dynamic_limit":9,"count_denied":true,'
                        '"cost":1}]}'),
        "sliding_log": '{"checks":[{"key":"k","algorithm":"sliding_log","limit":3,"window_ms":1000}]}',
        "buckets": '{"checks":[{"key":"k","algorithm":"sliding_window","limit":3,"window_ms":1000,"buckets":10}]}',
        "soft": '{"checks":[{"key":"k","limit":3,"window_ms":1000,"mode":"soft","soft_pct":20}]}',
        "shadow": '{"checks":[{"key":"k","limit":1e0,"window_ms":1000.0,"mode":"shadow","cost":0}]}',
        "unknown_field": '{"checks":[{"key":"k","limit":3}],"extra":1}',
        "not_object": '[1,2,3]',
        "empty_checks": '{"checks":[]}',
        "bad_utf8": b'{"checks":[{"key":"\xff","limit":3,"window_ms":1000}]}',
        "truncated": check_body[:40],
        "huge_numbers": '{"checks":[{"key":"k","limit":18446744073709551616,"window_ms":-1,"cost":1e400}]}',
        "same_key_two_algorithms": ('{"checks":[{"key":"k","name":"x","algorithm":"gcra","limit":3,'
                                    '"window_ms":1000},{"key":"k","name":"x","algorithm":"fixed_window",'
                                    '"limit":3,"window_ms":1000}]}'),
    }
    for name, data in checks.items():
        write("check_json", name, data)
    # The streaming reader of POST /v1/check against the DOM path: the same bodies, and the shapes only it
    # treats apart (a key given twice, escaped keys and strings, more checks than the fuzz target's bound).
    checks.update({
        "repeated_key": '{"checks":[{"key":"k","limit":"x","limit":3,"window_ms":1000}]}',
        "repeated_checks": '{"checks":[{"key":"a","limit":3}],"checks":[{"key":"b","limit":4}]}',
        "escaped": '{"che\\u0063ks":[{"k\\u0065y":"a\\"b\\u00e9","limit":3,"window_ms":1000,"cost":2}]}',
        "nine_checks": '{"checks":[' + ",".join('{"key":"k%d","limit":3}' % i for i in range(9)) + ']}',
        "null_field": '{"checks":[{"key":"k","limit":null}]}',
    })
    for name, data in checks.items():
        write("check_batch_json", name, data)

    gubernator = {
        "one": gub_body,
        "leaky_reset": ('{"requests":[{"name":"n","uniqueKey":"k","hits":2,"limit":5,"duration":60000,'
                        '"algorithm":1,"behavior":"RESET_REMAINING","burst":"7","metadata":{"a":"b"}}]}'),
        "several": ('{"requests":[{"name":"a","unique_key":"k","hits":1,"limit":3,"duration":1000},'
                    '{"name":"a","unique_key":"k","hits":5,"limit":3,"duration":1000},'
                    '{"name":"","unique_key":"","hits":-1}]}'),
        "behaviors": ('{"requests":[{"name":"b","unique_key":"k","limit":3,"duration":1000,'
                      '"behavior":"NO_BATCHING"},{"name":"b","unique_key":"k","limit":3,"duration":1000,'
                      '"behavior":"DRAIN_OVER_LIMIT","created_at":"1700000000000"}]}'),
        "null_requests": '{"requests":null}',
        "bad_type": '{"requests":{"name":1}}',
        "bad_enum": '{"requests":[{"algorithm":"FAST"}]}',
        "policy_name": '{"requests":[{"name":"api","unique_key":"k","hits":1,"limit":3,"duration":1000}]}',
        "empty": '{}',
    }
    for name, data in gubernator.items():
        write("gubernator_json", name, data)

    with open(os.path.join(ROOT, "examples", "policies.json")) as f:
        write("policies_json", "example", f.read())
    policies = {
        "single": '{"policies":{"p":{"limits":[{"algorithm":"gcra","limit":5,"window_ms":60000,"burst":2}]}}}',
        "modes": ('{"policies":{"s":{"mode":"soft","limits":[{"limit":5,"window_ms":1000,"soft_pct":10}]},'
                  '"d":{"mode":"dynamic","limits":[{"limit":5,"window_ms":1000,"dynamic_limit":10}]},'
                  '"h":{"mode":"shadow","limits":[{"algorithm":"sliding_log","limit":5,"window_ms":1000}]}}}'),
        "tiers_keys": ('{"policies":{"t":{"limits":[{"name":"a","limit":1,"window_ms":1000},{"name":"b",'
                       '"algorithm":"leaky_bucket","limit":2,"window_ms":1000,"max_delay_ms":500}],'
                       '"tiers":{"free":{"limits":[{"name":"a","limit":2}]},"pro plan":{"mode":"soft",'
                       '"limits":[{"name":"c","limit":9,"window_ms":60000,"soft_pct":5}]}},'
                       '"keys":{"k":{"limits":[{"name":"b","limit":3}]}}}}}'),
        "bad_name": '{"policies":{"a/b":{"limits":[{"limit":1,"window_ms":1000}]}}}',
        "unnamed_in_many": '{"policies":{"p":{"limits":[{"limit":1,"window_ms":1000},{"limit":2,"window_ms":1000}]}}}',
        "unknown_field": '{"policies":{"p":{"limits":[{"limit":1,"window_ms":1000}],"tier":{}}}}',
        "empty": '{"policies":{}}',
        "not_json": '{"policies":',
    }
    for name, data in policies.items():
        write("policies_json", name, data)

    # rls: two length bytes, the YAML config (empty: the target's own), then a RateLimitRequest.
    clear("rls")

    def rls(config, request_text):
        request = encode("envoy.service.ratelimit.v3.RateLimitRequest", request_text)
        return struct.pack("<H", len(config)) + config.encode() + request

    def descriptor(*entries, extra=""):
        return "descriptors { " + " ".join('entries { key: "%s" value: "%s" }' % e for e in entries) + extra + " }"

    own = {
        "replaces": 'domain: "d" ' + descriptor(("a", "v")) + " " + descriptor(("a", "x-y")),
        "unlimited_replaces": 'domain: "d" ' + descriptor(("a", "v")) + " " + descriptor(("u", "1")),
        "shared_wildcard": 'domain: "d" hits_addend: 2 ' + descriptor(("b", "p")) + " " + descriptor(("b", "q")),
        "quota": 'domain: "d" ' + descriptor(("c", "1")) + " " + descriptor(("c", "2")) + " " + descriptor(("c", "1")),
        "nested": 'domain: "d" ' + descriptor(("n", "1"), ("m", "a-b")) + " " + descriptor(("n", "1"), ("m", "ab")),
        "override": 'domain: "d" ' + descriptor(("z", "0"), extra=" limit { requests_per_unit: 1 unit: MINUTE }"),
        "shadow_zero": 'domain: "d" ' + descriptor(("s", "1")) + " " + descriptor(("z", "1")),
        "unknown_domain": 'domain: "other" ' + descriptor(("a", "v")),
    }
    for name, text in own.items():
        write("rls", name, rls("", text))
    custom = ("domain: e\ndescriptors:\n  - key: k\n    value: \"*.*\"\n"
              "    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: m}]}\n")
    write("rls", "custom_config", rls(custom, 'domain: "e" ' + descriptor(("k", "a.b"))))

    # request_head: a byte choosing the head size limit (below 128: 16 KiB; else (byte - 127) * 4 bytes),
    # then the bytes a client sends.
    clear("request_head")
    heads = {
        "wrk_check": "GET /v1/check?name=bench&algorithm=token_bucket&limit=1000&window_ms=1000&key=k1 HTTP/1.1\r\n"
                     "Host: 127.0.0.1:8080\r\n\r\n",
        "curl": "GET /v1/check?key=a HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n",
        "pipelined": "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nX-Empty:\r\n\r\n",
        "whitespace": "DELETE /v1/keys/k HTTP/1.1\r\nhost:x\r\nX-Spaces: \t a  b \t \r\n\r\n",
        "body": "POST /v1/check HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        "connection": "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
        "http10": "GET / HTTP/1.0\r\n\r\n",
        "fold": "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
    }
    for name, head in heads.items():
        write("request_head", name, b"\x00" + head.encode())
    write("request_head", "small_limit", b"\x90" + heads["curl"].encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
