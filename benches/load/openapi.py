"""GitHub's REST API description as an OpenAPI upstream: how long the import
takes, what it costs in memory, and how well tool search finds operations.

The description is npm's @octokit/openapi (scripts/lib.sh,
need_octokit_openapi: 1,223 operations, 13 MB of JSON), read from a file so
that no network is involved. Each round starts a gateway with only that
upstream and reports:

- the import: the gateway's own "OpenAPI document read" time (parse, $ref
  resolution, tools, each input schema compiled once to check it), the
  time from the process's start until GET /tools lists every tool, and the
  CPU time the process used until then (steadier than wall time when the
  machine is shared);
- memory: resident memory once the catalog is complete, and its high-water
  mark (the import's peak), against a gateway with no upstream;
- the catalog: tools, skipped operations, the GET /tools body, the catalog
  and search index build times and the index's size (from /status).

Then tool search, once: every operation's summary as the query ("Create an
issue", "List pull requests", ...), and where that operation ranks (recall
at 1, 5 and 10), with a few hand-written queries shown.

Usage: python3 benches/load/openapi.py [--rounds 5]
"""

import argparse
import json
import re
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import benchlib as b

SPEC = b.ROOT / ".octokit-openapi/node_modules/@octokit/openapi/generated/api.github.com.json"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def config(port, admin, with_github):
    text = (f'[server]\nlisten = "127.0.0.1:{port}"\nadmin_listen = "127.0.0.1:{admin}"\nthreads = 1\n\n'
            '[catalog]\npoll_interval = "600s"\nrequest_timeout = "60s"\n')
    if with_github:
        text += ('\n[[upstreams]]\nname = "github"\nprotocol = "openapi"\nurl = "https://api.github.com"\n'
                 f'spec = "file:{SPEC}"\ntoolkit = "GitHub"\n')
    return text


def hwm_mb(proc):
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pascal(text):
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", text) if p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not SPEC.exists():
        b.fail(f"{SPEC} is missing: bash -c 'source scripts/lib.sh; need_octokit_openapi'")
    document = json.loads(SPEC.read_text())
    summaries = {}
    for item in document["paths"].values():
        for method in METHODS:
            op = item.get(method)
            if op and op.get("operationId") and op.get("summary"):
                summaries[f"GitHub.{pascal(op['operationId'])}"] = op["summary"]
    operations = sum(1 for item in document["paths"].values() for m in METHODS if m in item)
    b.say(f"GitHub's description: {operations} operations, {SPEC.stat().st_size / 1e6:.1f} MB")

    work = Path(tempfile.mkdtemp(prefix="otc-openapi-"))
    port, admin = b.free_port(), b.free_port()
    idle = b.start_gateway("idle", config(port, admin, False), b.PROXY_CPU, work)
    try:
        b.wait_http(f"http://127.0.0.1:{port}/health")
        time.sleep(1)
        baseline = idle.rss_mb()
    finally:
        idle.stop()
    b.say(f"a gateway with no upstream: {baseline:.1f} MB resident")

    reads, wall, cpu, rss, peak = [], [], [], [], []
    tools = status = listing = None
    for round_ in range(args.rounds):
        port, admin = b.free_port(), b.free_port()
        started = time.monotonic()
        gw = b.start_gateway(f"github-{round_}", config(port, admin, True), b.PROXY_CPU, work, {"RUST_LOG": "info"})
        try:
            b.wait_http(f"http://127.0.0.1:{port}/health", timeout=60)
            deadline = time.monotonic() + 120
            while b.get_json(f"http://127.0.0.1:{port}/health").get("tools", 0) == 0:
                if time.monotonic() > deadline:
                    b.fail("no tools within 120 s")
                time.sleep(0.005)
            wall.append(time.monotonic() - started)
            # CPU time says what the import cost with less of the noise of
            # a shared machine than wall time (start-up included: ~20 ms).
            cpu.append(gw.cpu_seconds())
            time.sleep(0.5)
            rss.append(gw.rss_mb())
            peak.append(hwm_mb(gw))
            log = (work / f"github-{round_}.log").read_text(errors="replace")
            found = re.search(r"OpenAPI document read.*?took_ms=([0-9.]+)", log)
            reads.append(float(found.group(1)) if found else float("nan"))
            status = b.get_json(f"http://127.0.0.1:{admin}/status")
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/tools", timeout=30) as r:
                listing = r.read()
            tools = json.loads(listing)["items"]
            if round_ == args.rounds - 1:
                search(port, summaries, tools)
        finally:
            gw.stop()
        b.say(f"round {round_ + 1}: read {reads[-1]:.0f} ms, listed after {wall[-1] * 1000:.0f} ms "
              f"({cpu[-1] * 1000:.0f} ms of CPU), "
              f"{rss[-1]:.1f} MB resident, peak {peak[-1]:.1f} MB")

    upstream = next(u for u in status["upstreams"] if u["name"] == "github")
    b.say(f"\ntools: {len(tools)} of {operations} operations, {len(upstream['skipped'])} skipped")
    for reason in upstream["skipped"]:
        b.say(f"  skipped: {reason}")
    b.say(f"GET /tools: {len(listing) / 1e6:.1f} MB")
    b.say(f"catalog build {status['catalog_build_ms']:.0f} ms, search index {status['search_index']['bytes'] / 1e6:.2f} MB "
          f"built in {status['search_index']['build_ms']:.0f} ms")
    b.say(f"median over {args.rounds} rounds: document read {b.median(reads):.0f} ms, "
          f"all tools listed {b.median(wall) * 1000:.0f} ms after start ({b.median(cpu) * 1000:.0f} ms of CPU), "
          f"{b.median(rss):.1f} MB resident ({b.median(rss) - baseline:.1f} MB over an empty gateway), "
          f"peak {b.median(peak):.1f} MB")


def search(port, summaries, tools):
    listed = {t["id"].split("@")[0] for t in tools}
    ranks = []
    for key, summary in summaries.items():
        if key not in listed:
            continue
        query = urllib.parse.urlencode({"q": summary, "limit": 10})
        found = [t["id"].split("@")[0] for t in b.get_json(f"http://127.0.0.1:{port}/tools/search?{query}")["items"]]
        ranks.append(found.index(key) + 1 if key in found else None)
    total = len(ranks)
    at = lambda n: sum(1 for r in ranks if r is not None and r <= n) / total
    b.say(f"\ntool search, every summary as the query ({total}): recall@1 {at(1):.2f}, @5 {at(5):.2f}, @10 {at(10):.2f}")
    for text in ["create an issue", "list pull requests", "merge a pull request", "star a repository",
                 "delete a branch", "add a label to an issue", "list my notifications"]:
        query = urllib.parse.urlencode({"q": text, "limit": 3})
        found = [t["id"].split("@")[0] for t in b.get_json(f"http://127.0.0.1:{port}/tools/search?{query}")["items"]]
        b.say(f"  {text!r}: {', '.join(found)}")


if __name__ == "__main__":
    main()
