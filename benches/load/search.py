"""Tool search at 10,000 tools: recall, latency, index memory, publish time.

The catalog is the scale benchmark's (50 upstreams of 200 tools) plus one
upstream serving benches/search/toolkits.json: 293 tools with realistic
names and descriptions across 20 toolkits (mail, chat, calendar, files,
issues, payments, CRM, SMS, weather, translation, ...). Each query of
benches/search/queries.json, written the way people ask, names the tool a
person would pick; the benchmark reports how often that tool is among the
first 1, 5 and 10 results of GET /tools/search, and lists the misses.

Then it times searches: every query in turn, over one kept-alive connection,
`--rounds` times (client-side latency of the whole request), and reads the
server-side time per search from otc_gateway_tool_search_duration_seconds.
The index's size and build time, and the whole catalog's build time, come
from the admin /status.

Usage: python3 benches/load/search.py [--rounds 20] [--keep]
"""

import argparse
import http.client
import json
import tempfile
import time
import urllib.parse
from pathlib import Path

import benchlib as b
from scale import TOOLS_EACH, UPSTREAMS, tool as scale_tool

SEARCH = Path(__file__).resolve().parents[1] / "search"


def realistic_tools():
    """benches/search/toolkits.json as OTC definitions."""
    toolkits = json.loads((SEARCH / "toolkits.json").read_text())
    tools = []
    for toolkit, entries in toolkits.items():
        for name, description, parameters in entries:
            tools.append({
                "id": f"{toolkit}.{name}@1.0.0",
                "name": name,
                "description": description,
                "version": "1.0.0",
                "input_schema": {
                    "type": "object",
                    "properties": {p: {"type": "string", "description": d} for p, d in parameters.items()},
                },
            })
    return tools


def gateway_config(port, admin, upstreams):
    lines = [f'[server]\nlisten = "127.0.0.1:{port}"\nadmin_listen = "127.0.0.1:{admin}"\nthreads = 1\n',
             '[catalog]\npoll_interval = "300s"\n']
    for name, up_port in upstreams:
        lines.append(f'[[upstreams]]\nname = "{name}"\nurl = "http://127.0.0.1:{up_port}"\n')
    return "\n".join(lines)


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    queries = json.loads((SEARCH / "queries.json").read_text())
    work = Path(tempfile.mkdtemp(prefix="otc-search-"))
    work.chmod(0o755)
    blocks, upstreams, taken = [], [], set()
    catalogs = [[scale_tool(kit, n) for n in range(TOOLS_EACH)] for kit in range(UPSTREAMS)]
    catalogs.append(realistic_tools())
    for i, tools in enumerate(catalogs):
        path = work / f"catalog-{i}.json"
        path.write_text(json.dumps({"$schema": "otc://1.0", "tools": tools}))
        port = b.free_port()
        while port in taken:  # the kernel may hand out a port just released again
            port = b.free_port()
        taken.add(port)
        blocks.append(b.upstream_server_block(port, path))
        upstreams.append((f"up{i:02}", port))
    total = sum(len(c) for c in catalogs)

    procs = []
    try:
        procs.append(b.start_nginx("upstreams", b.DOLLAR + "".join(blocks), b.LOAD_CPU, work))
        for _, port in upstreams:
            b.wait_http(f"http://127.0.0.1:{port}/tools")
        port, admin = b.free_port(), b.free_port()
        started = time.monotonic()
        gw = b.start_gateway("gateway", gateway_config(port, admin, upstreams), b.PROXY_CPU, work)
        procs.append(gw)
        b.wait_catalog(port, total)
        complete = time.monotonic() - started
        status = b.get_json(f"http://127.0.0.1:{admin}/status")
        index = status["search_index"]

        b.say(f"# search: {total} tools ({len(catalogs) - 1} x {TOOLS_EACH} scale tools + "
              f"{len(catalogs[-1])} realistic), {len(queries)} queries, gateway on CPU {b.PROXY_CPU}")
        b.say(f"catalog complete after start:     {complete * 1000:.0f} ms")
        b.say(f"catalog build (merge, listing, index): {status['catalog_build_ms']:.1f} ms")
        b.say(f"search index: {index['documents']} documents, {index['terms']} terms, "
              f"{index['bytes'] / 1e6:.2f} MB, built in {index['build_ms']:.1f} ms")
        b.say(f"resident memory:                  {gw.rss_mb():.1f} MB")

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

        def search(text, limit):
            conn.request("GET", "/tools/search?" + urllib.parse.urlencode({"q": text, "limit": limit}))
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                b.fail(f"{text!r}: HTTP {response.status} {body[:200]!r}")
            return [item["id"].split("@")[0] for item in json.loads(body)["items"]]

        for title, file in (("queries", "queries.json"), ("held out", "held_out.json")):
            ranks = []
            for text, expected in json.loads((SEARCH / file).read_text()):
                found = search(text, 10)
                rank = found.index(expected) + 1 if expected in found else None
                ranks.append(rank)
                if rank is None or rank > 5:
                    b.say(f"  miss at 5: {text!r} wants {expected}, rank {rank}; top 3 {found[:3]}")
            at = lambda k: sum(1 for r in ranks if r is not None and r <= k) / len(ranks)
            mrr = sum(1 / r for r in ranks if r is not None) / len(ranks)
            b.say(f"{title} ({len(ranks)}): recall@1 {at(1):.3f}   recall@5 {at(5):.3f}   "
                  f"recall@10 {at(10):.3f}   MRR@10 {mrr:.3f}")

        metrics_before = b.wait_http(f"http://127.0.0.1:{admin}/metrics").decode()
        times = []
        for _ in range(args.rounds):
            for text, _ in queries:
                t0 = time.perf_counter()
                search(text, 10)
                times.append((time.perf_counter() - t0) * 1000)
        metrics_after = b.wait_http(f"http://127.0.0.1:{admin}/metrics").decode()
        name = "otc_gateway_tool_search_duration_seconds"
        count = metric(metrics_after, name + "_count") - metric(metrics_before, name + "_count")
        seconds = metric(metrics_after, name + "_sum") - metric(metrics_before, name + "_sum")
        b.say(f"GET /tools/search, limit 10, {len(times)} requests one at a time: "
              f"p50 {percentile(times, 0.5):.3f} ms, p99 {percentile(times, 0.99):.3f} ms (client-side, whole request)")
        bound = None
        for line in metrics_after.splitlines():  # cumulative buckets, in order
            if line.startswith(name + "_bucket{"):
                le = line.split('le="')[1].split('"')[0]
                before = metric(metrics_before, line.rsplit(" ", 1)[0])
                if bound is None and float(line.rsplit(" ", 1)[1]) - before >= 0.99 * count:
                    bound = le
        b.say(f"ranking time per search (server-side): mean {seconds / max(count, 1) * 1000:.3f} ms, "
              f"99% within {float(bound) * 1000:g} ms (histogram bucket)")
        b.say(f"resident memory after the searches: {gw.rss_mb():.1f} MB")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
