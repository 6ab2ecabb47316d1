-- wrk script for the load benchmarks: POSTs BENCH_BODY (or GETs when unset)
-- with BENCH_HEADERS, optionally paced (BENCH_DELAY_MS between a
-- connection's requests, for a load below saturation), and prints one
-- machine-readable RESULT line.
local body = os.getenv("BENCH_BODY")
if body and #body > 0 then
  wrk.method = "POST"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end

-- BENCH_HEADERS: more request headers, one "Name: value" a line.
for name, value in (os.getenv("BENCH_HEADERS") or ""):gmatch("([^:\n]+):%s*([^\n]*)") do
  wrk.headers[name] = value
end

local pace = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
if pace > 0 then
  function delay()
    return pace
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d errors=%d non2xx=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.timeout, e.status))
end
