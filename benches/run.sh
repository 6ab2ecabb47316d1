#!/usr/bin/env bash
# Every benchmark from one command: installs nginx and wrk when missing,
# builds the gateway as it ships (scripts/build-release.sh: release profile
# plus profile-guided optimisation, about ten minutes the first time), then runs
#   load   the gateway against nginx proxy_pass (benches/load/proxy_vs_nginx.py; --syscalls: system calls per call)
#   scale  10,000 tools from 50 upstreams        (benches/load/scale.py)
#   micro  criterion, the hot path's pieces      (benches/hot_path.rs)
#   instructions  instructions per call under callgrind, gateway and nginx (not in `all`)
#   search  tool search at 10,000 tools: recall, latency, index size (benches/load/search.py; not in `all`)
#   openapi  GitHub's OpenAPI description imported: time, memory, search (benches/load/openapi.py; not in `all`)
# Usage: benches/run.sh [--plain] [load|scale|micro|instructions|shared-limits|search|openapi|all] [extra args for the python script]
#   --plain  measure `cargo build --release`'s binary instead (no profile-guided step)
#   OTC_BENCH_GATEWAY=path  measure that binary, building nothing (e.g. target/pgo/otc-gateway again)
# Results and how to read them: benches/README.md. criterion (micro) builds
# with cargo's bench profile: the release profile's LTO, no profile-guided step.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
plain=0
if [ "${1:-}" = "--plain" ]; then plain=1; shift; fi
what="${1:-all}"
shift || true
need_build_tools
apt_install nginx wrk
cd "$ROOT"
if [ -n "${OTC_BENCH_GATEWAY:-}" ]; then
  : # a binary given by the caller, measured as it is
elif [ $plain = 1 ]; then
  cargo build --release --locked --bin otc-gateway
  export OTC_BENCH_GATEWAY="$ROOT/target/release/otc-gateway"
elif [ "$what" != micro ]; then
  gateway=$(bash scripts/build-release.sh | tail -1)  # a failed build stops here (pipefail)
  export OTC_BENCH_GATEWAY="$gateway"
fi
echo "gateway under test: ${OTC_BENCH_GATEWAY:-criterion}" >&2
case "$what" in
  load)
    case " $* " in *" --syscalls "*) command -v perf >/dev/null 2>&1 || apt_install linux-perf ;; esac
    python3 benches/load/proxy_vs_nginx.py "$@" ;;
  scale) python3 benches/load/scale.py "$@" ;;
  micro) cargo bench --locked --bench hot_path ;;
  instructions) apt_install valgrind; python3 benches/load/instructions.py "$@" ;;
  shared-limits) apt_install redis-server; python3 benches/load/shared_limits.py "$@" ;;
  search) python3 benches/load/search.py "$@" ;;
  openapi) need_octokit_openapi; python3 benches/load/openapi.py "$@" ;;
  all)
    python3 benches/load/proxy_vs_nginx.py
    python3 benches/load/scale.py
    cargo bench --locked --bench hot_path
    ;;
  *) echo "usage: benches/run.sh [--plain] [load|scale|micro|instructions|shared-limits|search|openapi|all]" >&2; exit 2 ;;
esac
