"""The gateway with 10,000 tools: 50 upstreams of 200 tools each.

Reports the time from the gateway's start until GET /tools lists every tool,
its resident memory, the latency of GET /tools, and call throughput with
10,000 tools against a gateway with 10. Upstreams are nginx server blocks
(static catalogs, a fixed answer) on CPU 1 with wrk; gateways on CPU 0.

Usage: python3 benches/load/scale.py [--rounds 3] [--seconds 10] [--connections 50]
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import benchlib as b

UPSTREAMS = 50
TOOLS_EACH = 200


def tool(kit, n):
    return {
        "id": f"Kit{kit:02}.Tool{n:03}@1.0.0",
        "name": f"Tool{n:03}",
        "description": f"Tool {n} of kit {kit}: adds two numbers.",
        "version": "1.0.0",
        "input_schema": {
            "type": "object",
            "properties": {"a": {"type": "number", "description": "first"}, "b": {"type": "number", "description": "second"}},
            "required": ["a", "b"],
        },
        "output_schema": {"type": "number"},
    }


def gateway_config(port, admin, upstreams):
    lines = [f'[server]\nlisten = "127.0.0.1:{port}"\nadmin_listen = "127.0.0.1:{admin}"\nthreads = 1\n',
             '[catalog]\npoll_interval = "300s"\n']
    for name, up_port in upstreams:
        lines.append(f'[[upstreams]]\nname = "{name}"\nurl = "http://127.0.0.1:{up_port}"\n')
    return "\n".join(lines)


def call_body(tool_id):
    return json.dumps({"$schema": "otc://1.0", "request": {"tool_id": tool_id, "input": {"a": 10, "b": 5}}})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="otc-scale-"))
    work.chmod(0o755)
    blocks, big, small = [], [], []
    for kit in range(UPSTREAMS):
        path = work / f"catalog-{kit}.json"
        path.write_text(json.dumps({"$schema": "otc://1.0", "tools": [tool(kit, n) for n in range(TOOLS_EACH)]}))
        port = b.free_port()
        blocks.append(b.upstream_server_block(port, path))
        big.append((f"kit{kit:02}", port))
    path = work / "catalog-small.json"
    path.write_text(json.dumps({"$schema": "otc://1.0", "tools": [tool(0, n) for n in range(10)]}))
    port = b.free_port()
    blocks.append(b.upstream_server_block(port, path))
    small.append(("kit00", port))

    procs = []
    try:
        procs.append(b.start_nginx("upstreams", b.DOLLAR + "".join(blocks), b.LOAD_CPU, work))
        for _, port in big + small:
            b.wait_http(f"http://127.0.0.1:{port}/tools")

        big_port, big_admin, small_port, small_admin = (b.free_port() for _ in range(4))
        started = time.monotonic()
        gw_big = b.start_gateway("gateway-10000", gateway_config(big_port, big_admin, big), b.PROXY_CPU, work)
        procs.append(gw_big)
        total = UPSTREAMS * TOOLS_EACH
        b.wait_catalog(big_port, total)
        complete = time.monotonic() - started
        listed = b.get_json(f"http://127.0.0.1:{big_port}/tools")
        if len(listed["items"]) != total:
            b.fail(f"GET /tools lists {len(listed['tools'])} tools, not {total}")
        rss_idle = gw_big.rss_mb()

        gw_small = b.start_gateway("gateway-10", gateway_config(small_port, small_admin, small), b.PROXY_CPU, work)
        procs.append(gw_small)
        b.wait_http(f"http://127.0.0.1:{small_port}/health")
        while b.get_json(f"http://127.0.0.1:{small_port}/health").get("tools") != 10:
            time.sleep(0.02)

        b.say(f"# scale: {UPSTREAMS} upstreams x {TOOLS_EACH} tools = {total} tools, gateway on CPU {b.PROXY_CPU}")
        b.say(f"catalog complete after start:       {complete * 1000:.0f} ms")
        b.say(f"resident memory, catalog loaded:    {rss_idle:.1f} MB")

        tools_url = f"http://127.0.0.1:{big_port}/tools"
        size = len(b.wait_http(tools_url))
        r = b.measured(gw_big, tools_url, args.seconds, 4)
        if r["errors"]:
            b.fail(f"GET /tools: {r['errors']} failed requests")
        b.say(f"GET /tools ({size / 1e6:.1f} MB body), 4 connections: {r['rps']:.0f} req/s, "
              f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, {r['cpu_us_per_req']:.0f} cpu us/req")

        body = call_body("Kit00.Tool007@1.0.0")
        urls = {"10000": f"http://127.0.0.1:{big_port}/tools/call", "10": f"http://127.0.0.1:{small_port}/tools/call"}
        targets = {"10000 tools": (gw_big, urls["10000"]), "10 tools": (gw_small, urls["10"])}
        _, ratio, cpu_ratio = b.side_by_side(targets, args.rounds, args.seconds, args.connections, body)
        b.say(f"median ratio 10000/10 tools, requests per second:    {ratio:.3f}")
        b.say(f"median ratio 10000/10 tools, requests per CPU second: {cpu_ratio:.3f}")
        b.say(f"resident memory after the calls:    {gw_big.rss_mb():.1f} MB (10000 tools), "
              f"{gw_small.rss_mb():.1f} MB (10 tools)")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
