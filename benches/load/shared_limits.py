"""What a rate limit shared through Redis costs a call, side by side with
the same limit kept in the gateway's memory.

One upstream at nginx speed, a redis-server, and two gateways with the same
`[[rate_limit]]` on the benchmark's tool (a rate no run reaches, so every
call is counted and served): one keeps its buckets in memory, the other in
Redis (`[state] redis`). The gateway under test is pinned to CPU 0; wrk, the
upstream and Redis share CPU 1. Runs alternate, the order flipping every
round. Reported: requests per second, the gateway's CPU per request, and
Redis's CPU per request in the shared runs.

Usage: python3 benches/load/shared_limits.py [--rounds 5] [--seconds 10] [--connections 50]
"""

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import benchlib as b
from proxy_vs_nginx import BODY, TOOL


def gateway_config(gw_port, admin_port, up_port, state):
    return f"""
[server]
listen = "127.0.0.1:{gw_port}"
admin_listen = "127.0.0.1:{admin_port}"
threads = 1

[catalog]
poll_interval = "300s"

[[upstreams]]
name = "bench"
url = "http://127.0.0.1:{up_port}"

[secrets]
BENCH_API_KEY = "env:BENCH_API_KEY"

[[rate_limit]]
name = "bench"
tools = ["Bench.*"]
per = "global"
rate = "1000000/s"
burst = 1000000
{state}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="otc-bench-"))
    work.chmod(0o755)
    (work / "catalog.json").write_text(json.dumps({"$schema": "otc://1.0", "tools": [TOOL]}))
    up_port, redis_port, mem_port, mem_admin, red_port, red_admin = (b.free_port() for _ in range(6))
    procs = []
    try:
        upstream = b.start_nginx("upstream", b.DOLLAR + b.upstream_server_block(up_port, work / "catalog.json"),
                                 b.LOAD_CPU, work)
        procs.append(upstream)
        redis = b.Pinned("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port),
                                   "--save", "", "--appendonly", "no"], b.LOAD_CPU, work)
        procs.append(redis)
        env = {"BENCH_API_KEY": "bench-secret-value"}
        memory = b.start_gateway("gateway-memory", gateway_config(mem_port, mem_admin, up_port, ""),
                                 b.PROXY_CPU, work, env)
        shared = b.start_gateway("gateway-redis", gateway_config(
            red_port, red_admin, up_port, f'[state]\nredis = "redis://127.0.0.1:{redis_port}"'),
            b.PROXY_CPU, work, env)
        procs += [memory, shared]
        via = {"redis": f"http://127.0.0.1:{red_port}/tools/call", "memory": f"http://127.0.0.1:{mem_port}/tools/call"}
        for port in (mem_port, red_port):
            b.wait_http(f"http://127.0.0.1:{port}/health")
            for _ in range(200):
                if b"Bench.Add" in b.wait_http(f"http://127.0.0.1:{port}/tools"):
                    break
                time.sleep(0.05)
        for name, url in via.items():
            answer = b.post_json(url, json.loads(BODY))
            if answer.get("result", {}).get("value") != 15:
                b.fail(f"{name}: the gateway did not answer the call: {answer}")
        # (A bucket at this rate expires within a millisecond: look for the script's runs.)
        stats = subprocess.run(["redis-cli", "-p", str(redis_port), "INFO", "commandstats"],
                               capture_output=True, text=True).stdout
        if "cmdstat_eval" not in stats:
            b.fail(f"the shared gateway did not check its limit in Redis: {stats}")

        b.say(f"# rate limit in Redis vs in memory: {args.rounds} rounds x {args.seconds}s, "
              f"{args.connections} connections, gateway on CPU {b.PROXY_CPU}, wrk + upstream + Redis on CPU {b.LOAD_CPU}")
        redis_before = redis.cpu_seconds()
        targets = {"redis": (shared, via["redis"]), "memory": (memory, via["memory"])}
        runs, rps_ratio, cpu_ratio = b.side_by_side(targets, args.rounds, args.seconds, args.connections, BODY)
        redis_cpu = redis.cpu_seconds() - redis_before
        # The warm-up's requests are not in the runs; they are few next to them.
        shared_requests = sum(r["rps"] * r["seconds"] for r in runs["redis"])
        med = {name: {k: b.median([r[k] for r in rs]) for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req")}
               for name, rs in runs.items()}
        b.say("")
        for name, m in med.items():
            b.say(f"median {name:<8} {m['rps']:>9.0f} req/s  p50 {m['p50_ms']:.3f} ms  p99 {m['p99_ms']:.3f} ms  "
                  f"{m['cpu_us_per_req']:.1f} gateway cpu us/req")
        b.say(f"redis-server cpu per shared call:                  {redis_cpu / shared_requests * 1e6:.1f} us (at most)")
        b.say(f"median ratio redis/memory, requests per second:     {rps_ratio:.3f}")
        b.say(f"median ratio redis/memory, requests per CPU second: {cpu_ratio:.3f} (the gateway's CPU)")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
