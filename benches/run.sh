#!/usr/bin/env bash
# Every benchmark from one command: installs nginx and wrk when missing,
# builds the release binary, then runs
#   load   the gateway against nginx proxy_pass (benches/load/proxy_vs_nginx.py)
#   scale  10,000 tools from 50 upstreams        (benches/load/scale.py)
#   micro  criterion, the hot path's pieces      (benches/hot_path.rs)
#   instructions  instructions per call under callgrind, gateway and nginx (not in `all`)
# Usage: benches/run.sh [load|scale|micro|instructions|all] [extra args for the python script]
# Results and how to read them: benches/README.md.
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
what="${1:-all}"
shift || true
need_build_tools
apt_install nginx wrk
cd "$ROOT"
cargo build --release --locked --bin otc-gateway
case "$what" in
  load) python3 benches/load/proxy_vs_nginx.py "$@" ;;
  scale) python3 benches/load/scale.py "$@" ;;
  micro) cargo bench --locked --bench hot_path ;;
  instructions) apt_install valgrind; python3 benches/load/instructions.py "$@" ;;
  all)
    python3 benches/load/proxy_vs_nginx.py
    python3 benches/load/scale.py
    cargo bench --locked --bench hot_path
    ;;
  *) echo "usage: benches/run.sh [load|scale|micro|instructions|all]" >&2; exit 2 ;;
esac
