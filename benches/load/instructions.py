"""User-space instructions per call, gateway against nginx proxy_pass, under
valgrind's callgrind: a count that does not move with the machine's noise
(wall-clock numbers on a shared 2-core VM do), and a profile of where the
gateway's instructions go (callgrind_annotate on the files it leaves).

Each proxy runs under callgrind in front of the same nginx upstream; wrk sends
the benchmark's call for 10 s; the counters are dumped right before and right
after, so start-up is not counted. The gateway is counted three times in one
run, a 10 s wrk run and a dump each: the OTC call, and the same call through
`/mcp` as a 2025-11-25 and as a 2026-07-28 client sends it.

Usage: python3 benches/load/instructions.py [--extra-tools N] [--server] [--cache]   (needs valgrind)
--cache also simulates the caches and branch predictors (callgrind's model:
the host's L1 sizes, a last level that holds everything) and prints, per
call, the distinct 64-byte lines of code a call runs through (counted from
each instruction's own count, not simulated), the instruction-cache lines
missed (a line fetched from L2 stalls the front end), data-cache misses and
mispredicted branches. The misses move by some 5% between two builds of
nearly the same code, with where the linker put it; the lines run do not.
About twice as slow.
--server also counts the OTC and 2026-07-28 calls through a virtual server
(`[[servers]]`, docs/servers.md) that renames the tool and describes it anew:
what a call through a server costs against the same call at the root.
--extra-tools N adds N tools to the upstream's catalog: the same call among
10,000 tools costs what it costs among 1 if the hot path does not grow with
the catalog (the scale benchmark's wall-clock ratio is too noisy to tell).
"""

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import benchlib as b
from proxy_vs_nginx import BODY, MCP_2026_BODY, MCP_2026_HEADERS, MCP_BODY, TOOL, mcp_session


def events(dump):
    """The dump's totals by event name (Ir alone unless --cache)."""
    names, totals = [], []
    for line in Path(dump).read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        if line.startswith("summary:") or line.startswith("totals:"):
            totals = [int(n) for n in line.split()[1:]]
            break
    return dict(zip(names, totals))


def instructions(dump):
    return events(dump).get("Ir", 0)


def lines_run(dump, requests):
    """The distinct 64-byte lines of code a call runs through, from a dump
    with per-instruction counts (`--dump-instr=yes`): each line counted by
    how often its most-run instruction ran, at most once a call."""
    positions, address, call_cost, ran = 1, 0, False, {}
    for line in Path(dump).read_text().splitlines():
        if line.startswith("positions:"):
            positions = len(line.split()) - 1
        elif line.startswith("calls="):
            # The next cost line is the call's inclusive cost, at the call site.
            call_cost = True
        elif line[:1].isdigit() or line[:1] in ("+", "-", "*"):
            fields = line.split()
            at = fields[0]
            if at.startswith("0x"):
                address = int(at, 16)
            elif at[0] in "+-":
                address += int(at)
            elif at != "*":
                address = int(at)
            if call_cost:
                call_cost = False
            elif len(fields) > positions:
                ran[address >> 6] = max(ran.get(address >> 6, 0), int(fields[positions]))
    return sum(min(n / max(requests, 1), 1.0) for n in ran.values())


# What --cache prints per call, from callgrind's event names.
CACHE_EVENTS = [("I1 lines missed", ["I1mr"]), ("D1 misses", ["D1mr", "D1mw"]),
                ("branches mispredicted", ["Bcm", "Bim"])]


# callgrind counts every byte a `rep movsb` moves as one instruction. glibc's
# memcpy switches to rep movsb above 2 KB, and for some address pairs only, so
# one 5 KB copy (pingora boxing a request's future) read as 9k instructions in
# one build and 0.5k in the next; a real CPU moves those bytes in about 100
# cycles. A threshold above any copy on the path keeps memcpy on its vector
# loop, whose instructions are counted as executed, for both proxies.
VECTOR_MEMCPY = {"GLIBC_TUNABLES": "glibc.cpu.x86_rep_movsb_threshold=0x10000000"}


def measure(name, cmd, phases, ready_url, work, env=None, tools=None, cache=False):
    """Instructions per call of the process `cmd` starts, for each phase
    `phases()` gives once it is ready: (label, url, body, headers). Returns
    {label: (instructions per call, the phase's dump, calls counted)}; with
    `cache` the dumps also hold the simulated caches' and branch predictors'
    events (`events`)."""
    out = work / f"callgrind.{name}"
    simulate = ["--cache-sim=yes", "--branch-sim=yes", "--dump-instr=yes"] if cache else []
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", *simulate, f"--callgrind-out-file={out}", *cmd],
                            env=dict(os.environ, **VECTOR_MEMCPY, **(env or {})), stdout=subprocess.DEVNULL,
                            stderr=open(work / f"{name}.valgrind.log", "w"), cwd=work)
    counted = []
    try:
        b.wait_http(ready_url, 120)
        # /health answers before the catalog is in; under callgrind a large
        # one takes a while.
        deadline = time.monotonic() + 300
        while tools is not None and b.get_json(ready_url).get("tools") != tools:
            if time.monotonic() > deadline:
                b.fail(f"the gateway did not list {tools} tools within 300s")
            time.sleep(0.5)
        time.sleep(2)
        runs = phases()
        for _, url, body, headers in runs:
            b.wrk(url, 3, 10, body, headers=headers)  # warm-up, not counted
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
        for label, url, body, headers in runs:
            r = b.wrk(url, 10, 10, body, headers=headers)
            if r["errors"]:
                b.fail(f"{name} {label}: {r['errors']} failed requests")
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True)
            counted.append((label, r["requests"]))
    finally:
        proc.send_signal(signal.SIGTERM if name == "gateway" else signal.SIGQUIT)
        proc.wait(60)
    dumps = sorted(work.glob(f"callgrind.{name}.*"), key=lambda p: int(p.suffix[1:]))[-len(counted):]
    return {label: (instructions(dump) / max(requests, 1), dump, requests) for (label, requests), dump in zip(counted, dumps)}


def filler(n):
    return {"id": f"Filler.Tool{n:05}@1.0.0", "name": f"Tool{n:05}", "description": f"Filler tool {n}.",
            "version": "1.0.0", "input_schema": TOOL["input_schema"], "output_schema": {"type": "number"}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--extra-tools", type=int, default=0, help="filler tools beside the benchmark's one")
    ap.add_argument("--server", action="store_true", help="also call through a virtual server that renames the tool")
    ap.add_argument("--tracing", choices=["off", "ratio0", "ratio1"], default="off",
                    help="[tracing]: none, sample_ratio 0, or every call recorded and exported (to the upstream "
                         "nginx, which refuses them: the spans are built, encoded and posted, then counted dropped)")
    ap.add_argument("--cache", action="store_true",
                    help="also the code lines run, cache lines missed and branches mispredicted per call")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="otc-instructions-"))
    work.chmod(0o755)
    tools = [TOOL] + [filler(n) for n in range(args.extra_tools)]
    (work / "catalog.json").write_text(json.dumps({"$schema": "otc://1.0", "tools": tools}))
    up, gw, admin, ngx = (b.free_port() for _ in range(4))
    upstream = b.start_nginx("upstream", b.DOLLAR + b.upstream_server_block(up, work / "catalog.json"), b.LOAD_CPU, work)
    try:
        b.wait_http(f"http://127.0.0.1:{up}/tools")
        config = work / "gateway.toml"
        config.write_text(f"""
[server]
listen = "127.0.0.1:{gw}"
admin_listen = "127.0.0.1:{admin}"
threads = 1
[catalog]
poll_interval = "300s"
[[upstreams]]
name = "bench"
url = "http://127.0.0.1:{up}"
secrets = ["BENCH_API_KEY"]
[secrets]
BENCH_API_KEY = "env:BENCH_API_KEY"
""" + ("" if not args.server else """
[[servers]]
name = "bench"
tools = ["Bench.*"]
rename = { "Bench.Add" = "Bench.Sum" }
describe = { "Bench.Add" = "Adds two amounts." }
""") + ("" if args.tracing == "off" else f"""
[tracing]
otlp_endpoint = "http://127.0.0.1:{up}"
sample_ratio = {0.0 if args.tracing == "ratio0" else 1.0}
"""))
        mcp_url = f"http://127.0.0.1:{gw}/mcp"
        # The same calls through the server, under its name for the tool
        # (as long as the root's: the bodies have the same length).
        served = f"http://127.0.0.1:{gw}/servers/bench"
        server_phases = [] if not args.server else [
            ("otc-server", f"{served}/tools/call", BODY.replace("Bench.Add", "Bench.Sum"), None),
            ("mcp-2026-server", f"{served}/mcp", MCP_2026_BODY.replace("Bench_Add", "Bench_Sum"),
             {**MCP_2026_HEADERS, "Mcp-Name": "Bench_Sum"})]
        gateway = measure(
            "gateway", [str(b.GATEWAY), "--config", str(config)],
            lambda: [("otc", f"http://127.0.0.1:{gw}/tools/call", BODY, None),
                     ("mcp", mcp_url, MCP_BODY, mcp_session(mcp_url)),
                     ("mcp-2026", mcp_url, MCP_2026_BODY, MCP_2026_HEADERS), *server_phases],
            f"http://127.0.0.1:{gw}/health", work, {"BENCH_API_KEY": "bench-secret-value", "RUST_LOG": "warn"},
            len(tools), args.cache)
        conf = work / "nginx-proxy.conf"
        user = "user root root;" if os.geteuid() == 0 else ""
        conf.write_text(f"""
master_process off; daemon off; worker_processes 1; {user}
pid {work}/nginx-proxy.pid; error_log {work}/nginx-proxy.err warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; keepalive_requests 1000000;
  client_body_temp_path {work}/t; proxy_temp_path {work}/t; fastcgi_temp_path {work}/t;
  uwsgi_temp_path {work}/t; scgi_temp_path {work}/t;
  upstream tools {{ server 127.0.0.1:{up}; keepalive 256; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{ngx};
    location / {{ proxy_pass http://tools; proxy_http_version 1.1; proxy_set_header Connection ""; }} }}
}}""")
        nginx = measure("nginx", ["nginx", "-p", str(work), "-c", str(conf), "-e", f"{work}/nginx-proxy.err"],
                        lambda: [("otc", f"http://127.0.0.1:{ngx}/tools/call", BODY, None)],
                        f"http://127.0.0.1:{ngx}/tools", work, cache=args.cache)["otc"]
    finally:
        upstream.stop()
    b.say(f"# user-space instructions per call (callgrind), 10 connections, {len(tools)} tools in the catalog")
    b.say(f"nginx proxy_pass          {nginx[0]:>9.0f}")
    for label, title in [("otc", "gateway"), ("mcp", "gateway MCP 2025-11-25"), ("mcp-2026", "gateway MCP 2026-07-28")]:
        b.say(f"{title:<25} {gateway[label][0]:>9.0f}")
    b.say(f"ratio nginx/gateway: {nginx[0] / gateway['otc'][0]:.3f}")
    for label in ("mcp", "mcp-2026"):
        b.say(f"ratio nginx/{label}: {nginx[0] / gateway[label][0]:.3f}, "
              f"{label}/gateway (OTC/MCP instructions): {gateway['otc'][0] / gateway[label][0]:.3f}")
    for label, root in [("otc-server", "otc"), ("mcp-2026-server", "mcp-2026")]:
        if label in gateway:
            b.say(f"{'gateway ' + label:<25} {gateway[label][0]:>9.0f}   "
                  f"server/root: {gateway[label][0] / gateway[root][0]:.3f}")
    if args.cache:
        b.say("# per call (callgrind's simulated caches and branch predictors)")
        b.say(f"{'':<25}{'code lines run':>23}" + "".join(f"{title:>23}" for title, _ in CACHE_EVENTS))
        for title, (_, dump, requests) in [("nginx proxy_pass", nginx), *((f"gateway {label}", counted)
                                                                          for label, counted in gateway.items())]:
            counts = events(dump)
            b.say(f"{title:<25}{lines_run(dump, requests):>23.0f}"
                  + "".join(f"{sum(counts.get(e, 0) for e in names) / max(requests, 1):>23.0f}"
                            for _, names in CACHE_EVENTS))
    for label, (_, dump, _) in gateway.items():
        b.say(f"profile {label}: callgrind_annotate --inclusive=yes {dump}")


if __name__ == "__main__":
    main()
