"""The gateway against nginx's plain proxy_pass, side by side.

One upstream at nginx speed (nginx serving a static catalog and a fixed
answer), nginx proxy_pass in front of it, and the gateway in front of it with
a tool that requires one secret: the gateway does its whole job on every call
(parse, resolve, validate, inject the secret, forward, re-wrap) while nginx
only relays bytes. The gateway is called three ways: `POST /tools/call`
(OTC), and the same tool and input as an MCP `tools/call` to `/mcp`, once as
a 2025-11-25 client sends it (after `initialize`: its session id and version
headers) and once as a 2026-07-28 client does (`_meta` in the body, the
`MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers). Each proxy is
pinned to CPU 0; wrk and the upstream share CPU 1. Runs alternate the targets,
the order flipping every round, so drift on a shared machine hits all.

With --compare PATH, a second gateway binary (another build of the same
source, e.g. `cargo build --release`'s beside the profile-guided one) is
called the same three ways in the same rounds, as `cmp`, `cmp-mcp` and
`cmp-mcp-2026`, so both builds meet the same machine.

With --syscalls, each target is then run once more under perf's syscall
tracepoints and its system calls per call are printed by name (needs perf:
`apt install linux-perf`; the kernel is most of a call).

Usage: python3 benches/load/proxy_vs_nginx.py [--rounds 5] [--seconds 10] [--connections 50] [--skip-paced]
       [--skip-mcp] [--syscalls] [--compare PATH]
"""

import argparse
import json
import math
import tempfile
from pathlib import Path

import benchlib as b

TOOL = {
    "id": "Bench.Add@1.0.0",
    "name": "Add",
    "description": "Adds two numbers.",
    "version": "1.0.0",
    "input_schema": {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
    "output_schema": {"type": "number"},
    "requirements": {"secrets": [{"id": "BENCH_API_KEY"}]},
}
BODY = json.dumps({"$schema": "otc://1.0", "request": {"tool_id": "Bench.Add@1.0.0", "input": {"a": 10, "b": 5}}})
# The same call through /mcp: 2025-11-25 (the headers after `initialize`
# are added per run, with the session id it gave) and 2026-07-28.
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}
MCP_BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "Bench_Add", "arguments": {"a": 10, "b": 5}}})
MCP_2026_BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                            "params": {"name": "Bench_Add", "arguments": {"a": 10, "b": 5},
                                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                                 "io.modelcontextprotocol/clientCapabilities": {}}}})
MCP_2026_HEADERS = {**MCP_ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                    "Mcp-Name": "Bench_Add"}


def mcp_session(url):
    """The headers a 2025-11-25 client sends after `initialize`."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}}}
    _, headers = b.post_json_with_headers(url, init, MCP_ACCEPT)
    return {**MCP_ACCEPT, "Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}


def check_mcp_answer(url, body, headers):
    answer = b.post_json(url, json.loads(body), headers)
    result = answer.get("result", {})
    if result.get("isError") is not False or result.get("content", [{}])[0].get("text") != "15":
        b.fail(f"the gateway did not answer the MCP call: {answer}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--skip-paced", action="store_true", help="only the saturating runs")
    ap.add_argument("--skip-mcp", action="store_true", help="only the OTC call and nginx, as before MCP was measured")
    ap.add_argument("--syscalls", action="store_true", help="also count system calls per call (perf)")
    ap.add_argument("--compare", metavar="PATH", help="a second gateway binary, measured in the same rounds")
    ap.add_argument("--tracing", action="store_true",
                    help="also two gateways with [tracing], sample_ratio 0 and 1 (exporting to the upstream nginx, "
                         "which refuses the posts: the whole export is counted), side by side with the one without")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="otc-bench-"))
    work.chmod(0o755)
    (work / "catalog.json").write_text(json.dumps({"$schema": "otc://1.0", "tools": [TOOL]}))
    up_port, ngx_port, gw_port, admin_port = (b.free_port() for _ in range(4))
    procs = []
    try:
        upstream = b.start_nginx("upstream", b.DOLLAR + b.upstream_server_block(up_port, work / "catalog.json"),
                                 b.LOAD_CPU, work)
        procs.append(upstream)
        b.wait_http(f"http://127.0.0.1:{up_port}/tools")
        nginx = b.start_nginx("nginx-proxy", f"""
  upstream tools {{ server 127.0.0.1:{up_port}; keepalive 256; keepalive_requests 1000000; }}
  server {{
    listen 127.0.0.1:{ngx_port} backlog=4096;
    location / {{ proxy_pass http://tools; proxy_http_version 1.1; proxy_set_header Connection ""; }}
  }}""", b.PROXY_CPU, work)
        procs.append(nginx)
        gateway = b.start_gateway("gateway", f"""
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
""", b.PROXY_CPU, work, env={"BENCH_API_KEY": "bench-secret-value"})
        procs.append(gateway)
        traced = {}
        if args.tracing:
            config = (work / "gateway.toml").read_text()
            for name, ratio in [("ratio0", 0.0), ("ratio1", 1.0)]:
                port, admin = b.free_port(), b.free_port()
                text = config.replace(f"127.0.0.1:{gw_port}", f"127.0.0.1:{port}").replace(
                    f"127.0.0.1:{admin_port}", f"127.0.0.1:{admin}")
                text += f'\n[tracing]\notlp_endpoint = "http://127.0.0.1:{up_port}"\nsample_ratio = {ratio}\n'
                proc = b.start_gateway(f"gateway-{name}", text, b.PROXY_CPU, work,
                                       env={"BENCH_API_KEY": "bench-secret-value"})
                procs.append(proc)
                b.wait_tool(port)
                traced[name] = (proc, f"http://127.0.0.1:{port}/tools/call")
        compared = {}
        if args.compare:
            config = (work / "gateway.toml").read_text()
            port, admin = b.free_port(), b.free_port()
            text = config.replace(f"127.0.0.1:{gw_port}", f"127.0.0.1:{port}").replace(
                f"127.0.0.1:{admin_port}", f"127.0.0.1:{admin}")
            proc = b.start_gateway("gateway-compared", text, b.PROXY_CPU, work,
                                   env={"BENCH_API_KEY": "bench-secret-value"}, binary=args.compare)
            procs.append(proc)
            b.wait_tool(port)
            url = f"http://127.0.0.1:{port}/mcp"
            check_mcp_answer(url, MCP_2026_BODY, MCP_2026_HEADERS)
            compared = {"cmp": (proc, f"http://127.0.0.1:{port}/tools/call"),
                        "cmp-mcp": (proc, url, MCP_BODY, mcp_session(url)),
                        "cmp-mcp-2026": (proc, url, MCP_2026_BODY, MCP_2026_HEADERS)}
            if args.skip_mcp:
                compared = {"cmp": compared["cmp"]}

        direct = f"http://127.0.0.1:{up_port}/tools/call"
        via = {"nginx": f"http://127.0.0.1:{ngx_port}/tools/call", "gateway": f"http://127.0.0.1:{gw_port}/tools/call"}
        b.wait_http(f"http://127.0.0.1:{up_port}/tools")
        b.wait_http(f"http://127.0.0.1:{ngx_port}/tools")
        b.wait_tool(gw_port)
        answer = b.post_json(via["gateway"], json.loads(BODY))
        if answer.get("result", {}).get("value") != 15:
            b.fail(f"the gateway did not answer the call: {answer}")
        mcp_url = f"http://127.0.0.1:{gw_port}/mcp"
        mcp_headers = mcp_session(mcp_url)
        check_mcp_answer(mcp_url, MCP_BODY, mcp_headers)
        check_mcp_answer(mcp_url, MCP_2026_BODY, MCP_2026_HEADERS)

        b.say(f"# gateway (OTC, MCP 2025-11-25, MCP 2026-07-28) vs nginx proxy_pass: {args.rounds} rounds x "
              f"{args.seconds}s, {args.connections} connections, proxy on CPU {b.PROXY_CPU}, "
              f"wrk + upstream on CPU {b.LOAD_CPU}")
        targets = {"gateway": (gateway, via["gateway"]), "nginx": (nginx, via["nginx"]),
                   "mcp": (gateway, mcp_url, MCP_BODY, mcp_headers),
                   "mcp-2026": (gateway, mcp_url, MCP_2026_BODY, MCP_2026_HEADERS)}
        if args.skip_mcp:
            targets = {name: targets[name] for name in ("gateway", "nginx")}
        targets.update(traced)
        targets.update(compared)
        runs, rps_ratio, cpu_ratio = b.side_by_side(targets, args.rounds, args.seconds, args.connections, BODY)
        keys = ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "user_us_per_req", "sys_us_per_req")
        med = {name: {k: b.median([r[k] for r in rs]) for k in keys} for name, rs in runs.items()}
        b.say("")
        for name, m in med.items():
            b.say(f"median {name:<8} {m['rps']:>9.0f} req/s  p50 {m['p50_ms']:.3f} ms  p99 {m['p99_ms']:.3f} ms  "
                  f"{m['cpu_us_per_req']:.1f} cpu us/req ({m['user_us_per_req']:.1f} user, "
                  f"{m['sys_us_per_req']:.1f} system)")
        b.say(f"median ratio gateway/nginx, requests per second:        {rps_ratio:.3f}")
        b.say(f"median ratio gateway/nginx, requests per CPU second:     {cpu_ratio:.3f}")
        for cand, base in [("mcp", "nginx"), ("mcp-2026", "nginx"), ("mcp", "gateway"), ("mcp-2026", "gateway"),
                           ("ratio0", "gateway"), ("ratio1", "gateway"), ("cmp", "nginx"), ("cmp-mcp", "nginx"),
                           ("cmp-mcp-2026", "nginx"), ("gateway", "cmp"), ("mcp", "cmp-mcp"),
                           ("mcp-2026", "cmp-mcp-2026")]:
            if cand in runs and base in runs:
                rps, cpu = b.ratios(runs, cand, base)
                rounds = ", ".join(f"{r['cpu_us_per_req'] / c['cpu_us_per_req']:.2f}"
                                   for c, r in zip(runs[cand], runs[base]))
                b.say(f"median ratio {cand}/{base}: {rps:.3f} requests per second, {cpu:.3f} per CPU second "
                      f"(per CPU second by round: {rounds})")

        if args.syscalls:
            syscalls(args, targets, BODY)
        if not args.skip_paced:
            paced_latency(args, direct, via, med["gateway"]["rps"] / 2)
    finally:
        for p in reversed(procs):
            p.stop()


def syscalls(args, targets, body):
    """System calls per call of each target, under the same saturating load."""
    b.say("")
    b.say(f"# system calls per call ({args.seconds}s of wrk each, {args.connections} connections, perf)")
    for name, t in targets.items():
        proc, url = t[0], t[1]
        own_body, headers = (t[2], t[3]) if len(t) > 2 else (body, None)
        r, per_call = b.syscalls_per_call(proc, url, args.seconds, args.connections, own_body, headers)
        named = ", ".join(f"{n} {c:.3f}" for n, c in per_call.items() if c >= 0.001)
        b.say(f"syscalls {name:<8} {sum(per_call.values()):.3f} per call ({r['rps']:.0f} req/s): {named}")


def paced_latency(args, direct, via, target):
    """Latency at half the gateway's saturating load. wrk is closed-loop, so
    the load is paced: each connection waits 1 ms between requests, and the
    number of connections is calibrated, for each target separately, until
    it sees the target rate."""
    targets = {"direct": direct, **via}
    conns = {}
    for name, url in targets.items():
        c = max(1, math.ceil(target / 800))
        for _ in range(4):
            probe = b.wrk(url, 3, c, BODY, delay_ms=1)
            c = max(1, min(1000, round(c * target / max(probe["rps"], 1))))
        conns[name] = c
    b.say("")
    b.say(f"# paced at ~{target:.0f} req/s (half the gateway's saturating rate), "
          f"{args.rounds} rounds x {args.seconds}s; connections: "
          + ", ".join(f"{n} {c}" for n, c in conns.items()))
    paced = {name: [] for name in targets}
    for _ in range(args.rounds):
        for name, url in targets.items():
            r = b.wrk(url, args.seconds, conns[name], BODY, delay_ms=1)
            if r["errors"]:
                b.fail(f"{name} paced: {r['errors']} failed requests")
            paced[name].append(r)
    for name, rs in paced.items():
        b.say(f"paced {name:<8} {b.median([r['rps'] for r in rs]):>8.0f} req/s  "
              f"p50 {b.median([r['p50_ms'] for r in rs]):.3f} ms  p99 {b.median([r['p99_ms'] for r in rs]):.3f} ms")
    for name in via:
        added = [p["p99_ms"] - d["p99_ms"] for p, d in zip(paced[name], paced["direct"])]
        b.say(f"p99 added over a direct call, {name:<8} median {b.median(added):.3f} ms")


if __name__ == "__main__":
    main()
