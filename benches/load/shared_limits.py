"""What a rate limit shared through Redis costs a call, side by side with
the same limit kept in the gateway's memory.

One upstream at nginx speed, a redis-server, and two gateways with the same
`[[rate_limit]]` on the benchmark's tool (a rate no run reaches, so every
call is counted and served): one keeps its buckets in memory, the other in
Redis (`[state] redis`). The gateway under test is pinned to CPU 0; wrk, the
upstream and Redis share CPU 1. Runs alternate, the order flipping every
round. Reported: requests per second, the gateway's CPU per request, and
Redis's CPU per request in the shared runs.

With `--fleet`: three gateways sharing the Redis behind nginx round-robin
(the fleet test's setup, under load), a global limit of 100 calls a second
(burst 100) on the call, one saturating wrk run: how many calls the fleet
served against what the limit allows, and the fleet's throughput.

Usage: python3 benches/load/shared_limits.py [--rounds 5] [--seconds 10] [--connections 50] [--fleet]
"""

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import benchlib as b
from proxy_vs_nginx import BODY, TOOL


def gateway_config(gw_port, admin_port, up_port, state, rate="1000000/s", burst=1000000):
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
secrets = ["BENCH_API_KEY"]

[secrets]
BENCH_API_KEY = "env:BENCH_API_KEY"

[[rate_limit]]
name = "bench"
tools = ["Bench.*"]
per = "global"
rate = "{rate}"
burst = {burst}
{state}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--fleet", action="store_true", help="three gateways behind nginx, one global limit")
    args = ap.parse_args()
    if args.fleet:
        return fleet(args)

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
            b.wait_tool(port)
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


def fleet(args):
    work = Path(tempfile.mkdtemp(prefix="otc-bench-"))
    work.chmod(0o755)
    (work / "catalog.json").write_text(json.dumps({"$schema": "otc://1.0", "tools": [TOOL]}))
    up_port, redis_port, lb_port = (b.free_port() for _ in range(3))
    ports = [(b.free_port(), b.free_port()) for _ in range(3)]
    procs = []
    try:
        procs.append(b.start_nginx("upstream", b.DOLLAR + b.upstream_server_block(up_port, work / "catalog.json"),
                                   b.LOAD_CPU, work))
        procs.append(b.Pinned("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(redis_port),
                                        "--save", "", "--appendonly", "no"], b.LOAD_CPU, work))
        state = f'[state]\nredis = "redis://127.0.0.1:{redis_port}"'
        for i, (port, admin) in enumerate(ports):
            procs.append(b.start_gateway(f"gateway-{i}", gateway_config(port, admin, up_port, state, "100/s", 100),
                                         b.PROXY_CPU, work, {"BENCH_API_KEY": "bench-secret-value"}))
        servers = "".join(f"    server 127.0.0.1:{port};\n" for port, _ in ports)
        procs.append(b.start_nginx("balancer", f"""
  upstream gateways {{
{servers}    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{lb_port} backlog=4096;
    location / {{ proxy_pass http://gateways; proxy_http_version 1.1; proxy_set_header Connection "";
                 proxy_set_header Host $host; }}
  }}""", b.PROXY_CPU, work))
        for port, _ in ports:
            b.wait_tool(port)
        b.wait_http(f"http://127.0.0.1:{lb_port}/health")
        time.sleep(1.5)  # the burst refills after the readiness checks
        r = b.wrk(f"http://127.0.0.1:{lb_port}/tools/call", args.seconds, args.connections, BODY)
        served = r["requests"] - r["errors"]
        allowed = 100 + 100 * r["seconds"]
        b.say(f"# fleet: 3 gateways + nginx on CPU {b.PROXY_CPU}, wrk + upstream + Redis on CPU {b.LOAD_CPU}, "
              f"{args.seconds}s, {args.connections} connections, global limit 100/s burst 100")
        b.say(f"requests {r['requests']} ({r['rps']:.0f}/s), served {served}, limited {r['errors']}")
        b.say(f"the limit allows {allowed:.0f} in {r['seconds']:.1f}s: served / allowed = {served / allowed:.3f}")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
