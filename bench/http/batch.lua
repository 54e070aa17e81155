-- wrk script: POST /v1/check with 100 checks per request on 100 distinct keys (a run of consecutive keys
-- from a random start among $BATCH_KEYS, default 100000; a key may appear only once per limit in a batch);
-- 256 bodies prepared up front. Used by bench/http/run.sh (its POST row) and bench/http/post.sh.
local keys = tonumber(os.getenv("BATCH_KEYS") or "100000")
math.randomseed(7)
local bodies = {}
for b = 1, 256 do
  local checks = {}
  local base = math.random(0, keys - 1)
  for i = 1, 100 do
    checks[i] = string.format('{"key":"k%d","name":"bench","algorithm":"token_bucket","limit":1000000000,"window_ms":1000}',
                              (base + i) % keys + 1)
  end
  bodies[b] = '{"checks":[' .. table.concat(checks, ",") .. ']}'
end
local n = 0
local headers = { ["Content-Type"] = "application/json" }
request = function()
  n = n % #bodies + 1
  return wrk.format("POST", "/v1/check", headers, bodies[n])
end
