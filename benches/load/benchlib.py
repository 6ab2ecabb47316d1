"""Shared parts of the load benchmarks: processes pinned to CPUs, nginx
instances, wrk runs, CPU time read from /proc, and medians.

Standard library only, so `benches/run.sh` needs nothing but Debian's nginx
and wrk and a release build of the gateway.
"""

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The binary under test: benches/run.sh sets this to the profile-guided build
# (scripts/build-release.sh), or to `cargo build --release`'s with --plain.
GATEWAY = Path(os.environ.get("OTC_BENCH_GATEWAY", ROOT / "target" / "release" / "otc-gateway")).resolve()
WRK_SCRIPT = Path(__file__).resolve().parent / "wrk.lua"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The proxy under test gets CPU 0 to itself; wrk and the upstream share CPU 1.
PROXY_CPU = "0"
LOAD_CPU = "1"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except Exception:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {timeout}s")
            time.sleep(0.02)


def wait_tool(port, tool=b"Bench.Add", timeout=10.0):
    """Waits until the gateway on `port` serves and lists `tool`."""
    wait_http(f"http://127.0.0.1:{port}/health")
    deadline = time.time() + timeout
    while tool not in wait_http(f"http://127.0.0.1:{port}/tools"):
        if time.time() > deadline:
            fail(f"the gateway on port {port} never listed {tool!r}")
        time.sleep(0.05)


def wait_catalog(port, total, timeout=60.0):
    """Waits until the gateway on `port` lists `total` tools (its /health
    count); fails after `timeout` seconds."""
    started = time.monotonic()
    while True:
        try:
            if get_json(f"http://127.0.0.1:{port}/health").get("tools") == total:
                return
        except Exception:
            pass
        if time.monotonic() - started > timeout:
            fail(f"the catalog was not complete within {timeout:.0f}s")
        time.sleep(0.005)


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def post_json(url, body, headers=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def post_json_with_headers(url, body, headers=None):
    """A POST's JSON answer and its response headers."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read()), r.headers


class Pinned:
    """A process pinned to one CPU, stopped (SIGTERM, then SIGKILL) on exit.
    It runs in `workdir`, so what it writes beside itself (a gateway's
    `[state] dir`) stays in the run's directory, never in the checkout."""

    def __init__(self, name, cmd, cpu, workdir, env=None):
        self.name = name
        self.log = open(Path(workdir) / f"{name}.log", "wb")
        full_env = dict(os.environ, **(env or {}))
        self.proc = subprocess.Popen(["taskset", "-c", cpu, *cmd], stdout=self.log, stderr=subprocess.STDOUT, env=full_env,
                                     cwd=workdir)

    @property
    def pid(self):
        return self.proc.pid

    def cpu_seconds(self):
        """User + system CPU time of the process and its children (nginx's
        workers), all threads included."""
        return sum(self.cpu_split())

    def cpu_split(self):
        """User and system CPU time (seconds) of the process and its
        children, all threads included."""
        user = system = 0
        for pid in [self.pid, *children(self.pid)]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            user += int(fields[11])  # utime
            system += int(fields[12])  # stime
        return user / CLK_TCK, system / CLK_TCK

    def rss_mb(self):
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def children(pid):
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


NGINX_COMMON = """
worker_processes 1;
daemon off;
pid {work}/{name}.pid;
error_log {work}/{name}.err warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  client_body_temp_path {work}/tmp-{name};
  proxy_temp_path {work}/tmp-{name};
  fastcgi_temp_path {work}/tmp-{name};
  uwsgi_temp_path {work}/tmp-{name};
  scgi_temp_path {work}/tmp-{name};
{body}
}}
"""


def start_nginx(name, http_body, cpu, work):
    """nginx with one worker and `http_body` inside its http block."""
    conf = Path(work) / f"{name}.conf"
    conf.write_text(NGINX_COMMON.format(work=work, name=name, body=http_body))
    user = "user root root;\n" if os.geteuid() == 0 else ""
    if user:
        conf.write_text(user + conf.read_text())
    return Pinned(name, ["nginx", "-e", f"{work}/{name}.err", "-p", str(work), "-c", str(conf)], cpu, work)


def upstream_server_block(port, catalog_path):
    """A tool server at nginx speed: a static catalog and a fixed answer."""
    answer = '{"${dollar}schema":"otc://1.0","result":{"call_id":"bench","duration":0.05,"success":true,"value":15}}'
    return f"""
  server {{
    listen 127.0.0.1:{port} backlog=4096;
    location = /tools {{ default_type application/json; alias {catalog_path}; }}
    location = /tools/call {{ default_type application/json; return 200 '{answer}'; }}
  }}"""


# nginx has no escape for "$" in strings; a variable holding it is the idiom.
DOLLAR = '  geo $dollar { default "$"; }\n'


def start_gateway(name, config_text, cpu, work, env=None, binary=None):
    """The gateway (`binary`, else the one under test) with `config_text`."""
    config = Path(work) / f"{name}.toml"
    config.write_text(config_text)
    env = dict({"RUST_LOG": "warn"}, **(env or {}))
    binary = Path(binary).resolve() if binary else GATEWAY
    return Pinned(name, [str(binary), "--config", str(config)], cpu, work, env)


def wrk(url, seconds, connections, body=None, delay_ms=0, cpu=LOAD_CPU, headers=None):
    """One wrk run: requests per second and latency percentiles (ms).
    `headers` ({name: value}) are sent besides Content-Type."""
    lines = "\n".join(f"{name}: {value}" for name, value in (headers or {}).items())
    env = dict(os.environ, BENCH_BODY=body or "", BENCH_DELAY_MS=str(delay_ms), BENCH_HEADERS=lines)
    cmd = ["taskset", "-c", cpu, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s",
           "-s", str(WRK_SCRIPT), url]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    line = next(l for l in out.splitlines() if l.startswith("RESULT "))
    r = {k: int(v) for k, v in (kv.split("=") for kv in line.split()[1:])}
    seconds_run = r["duration_us"] / 1e6
    return {
        "requests": r["requests"],
        "rps": r["requests"] / seconds_run,
        "p50_ms": r["p50_us"] / 1000,
        "p90_ms": r["p90_us"] / 1000,
        "p99_ms": r["p99_us"] / 1000,
        "errors": r["errors"] + r["non2xx"],
        "seconds": seconds_run,
    }


def measured(proc, url, seconds, connections, body=None, delay_ms=0, headers=None):
    """A wrk run with the CPU time `proc` spent serving it."""
    before = proc.cpu_split()
    r = wrk(url, seconds, connections, body, delay_ms, headers=headers)
    user, system = (after - was for after, was in zip(proc.cpu_split(), before))
    spent = user + system
    r["cpu_us_per_req"] = spent * 1e6 / max(r["requests"], 1)
    r["user_us_per_req"] = user * 1e6 / max(r["requests"], 1)
    r["sys_us_per_req"] = system * 1e6 / max(r["requests"], 1)
    r["cpu_busy"] = spent / r["seconds"]
    return r


def syscalls_per_call(proc, url, seconds, connections, body=None, headers=None):
    """System calls per call of `proc` (all its threads, nginx's workers
    included) over one wrk run, by name: perf counts the kernel's syscall
    tracepoints, which costs the process next to nothing (strace -c would
    slow it down enough to change how many events each wait returns).
    Returns the run and {name: calls per request}, largest first."""
    pids = ",".join(str(p) for p in [proc.pid, *children(proc.pid)])
    with tempfile.NamedTemporaryFile(suffix=".perf") as out:
        perf = subprocess.Popen(["perf", "stat", "-x", ",", "-o", out.name, "-e", "syscalls:sys_enter_*",
                                 "-p", pids], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)  # perf attaches to ~350 tracepoints per thread first
        r = wrk(url, seconds, connections, body, headers=headers)
        perf.send_signal(signal.SIGINT)
        perf.wait(30)
        text = Path(out.name).read_text()
    counts = {}
    for line in text.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("syscalls:sys_enter_") and fields[0].isdigit():
            counts[fields[2].removeprefix("syscalls:sys_enter_")] = int(fields[0])
    per_call = {name: n / max(r["requests"], 1) for name, n in counts.items() if n}
    return r, dict(sorted(per_call.items(), key=lambda kv: -kv[1]))


def side_by_side(targets, rounds, seconds, connections, body):
    """Saturating runs of the targets, alternating (the order flips every
    round, so drift on a shared machine hits all alike), after a warm-up of
    each.

    `targets` is {name: (Pinned process, url)} or {name: (Pinned process,
    url, body, headers)} (a target's own request; `body` is the others'),
    the candidate first and the baseline second. Prints a line per run;
    returns the runs per name and the median per-round ratios
    candidate/baseline of requests per second and of requests per CPU
    second (`ratios` gives any other pair's)."""
    requests = {name: (t[0], t[1], t[2] if len(t) > 2 else body, t[3] if len(t) > 3 else None)
                for name, t in targets.items()}
    for _, url, own_body, headers in requests.values():  # warm-up: connection pools, caches, page faults
        wrk(url, 2, connections, own_body, headers=headers)
    runs = {name: [] for name in targets}
    say(f"{'round':>5} {'target':<10} {'req/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'cpu us/req':>10} {'user':>5} "
        f"{'sys':>5} {'cpu busy':>8}")
    for i in range(rounds):
        for name in (list(targets) if i % 2 == 0 else list(targets)[::-1]):
            proc, url, own_body, headers = requests[name]
            r = measured(proc, url, seconds, connections, own_body, headers=headers)
            if r["errors"]:
                fail(f"{name}: {r['errors']} failed requests")
            runs[name].append(r)
            say(f"{i + 1:>5} {name:<10} {r['rps']:>9.0f} {r['p50_ms']:>7.3f} {r['p99_ms']:>7.3f} "
                f"{r['cpu_us_per_req']:>10.1f} {r['user_us_per_req']:>5.1f} {r['sys_us_per_req']:>5.1f} "
                f"{r['cpu_busy'] * 100:>7.0f}%")
    cand, base = list(targets)[:2]
    rps_ratio, cpu_ratio = ratios(runs, cand, base)
    return runs, rps_ratio, cpu_ratio


def ratios(runs, cand, base):
    """The median per-round ratios cand/base: of requests per second, and of
    requests per CPU second."""
    pairs = list(zip(runs[cand], runs[base]))
    return (median([c["rps"] / b["rps"] for c, b in pairs]),
            median([b["cpu_us_per_req"] / c["cpu_us_per_req"] for c, b in pairs]))


def median(values):
    return statistics.median(values)


def say(*args):
    print(*args, flush=True)


def fail(message):
    print(f"benchmark failed: {message}", file=sys.stderr)
    sys.exit(1)
