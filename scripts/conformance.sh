#!/usr/bin/env bash
# MCP's own conformance suite (npm @modelcontextprotocol/conformance) against
# the gateway, both ways:
#   - server scenarios against /mcp of the demo gateway (its two built-in
#     OTC tool servers behind it): server-initialize, ping, tools-list,
#     dns-rebinding-protection;
#   - client scenarios against the gateway as an MCP client, through
#     tests/peers/conformance_client.py, which starts the gateway with the
#     suite's server as an MCP upstream: tools_call at MCP 2026-07-28 (a
#     server without the handshake), initialize and tools_call at 2025-11-25.
# Installs the suite and the Node 22 it needs into .conformance/ first.
# The gateway binary: $OTC_GATEWAY_BIN, else target/debug/otc-gateway (built
# when missing). Exits 1 when any scenario fails.
source "$(dirname "$0")/lib.sh"
need_conformance
cd "$ROOT"

BIN="${OTC_GATEWAY_BIN:-$ROOT/target/debug/otc-gateway}"
if [ ! -x "$BIN" ]; then
  cargo build --bin otc-gateway
fi
export OTC_GATEWAY_BIN="$BIN"
# The suite's `node` shebang must find Node 22, not the system's.
export PATH="$ROOT/.conformance/node_modules/.bin:$PATH"

work="$(mktemp -d)"
demo_pid=""
cleanup() {
  if [ -n "$demo_pid" ]; then kill "$demo_pid" 2>/dev/null || true; wait "$demo_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

failed=()
passed=0

# --- server scenarios: the demo gateway's /mcp ------------------------------
"$BIN" demo --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 >"$work/demo.out" 2>"$work/demo.err" &
demo_pid=$!
front=""
for _ in $(seq 1 200); do
  front="$(sed -n 's/^otc-gateway listening on \([0-9.:]*\) .*/\1/p' "$work/demo.out" | head -n 1)"
  [ -n "$front" ] && break
  kill -0 "$demo_pid" 2>/dev/null || { cat "$work/demo.err" >&2; echo "the demo gateway exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$front" ] || { echo "the demo gateway did not start" >&2; exit 1; }
# Wait until the catalog has the demo's tools.
for _ in $(seq 1 100); do
  python3 -c 'import json, sys, urllib.request
sys.exit(0 if json.load(urllib.request.urlopen(sys.argv[1], timeout=2))["tools"] > 0 else 1)' \
    "http://$front/health" 2>/dev/null && break
  sleep 0.1
done

for scenario in server-initialize ping tools-list dns-rebinding-protection; do
  echo "== server scenario $scenario against http://$front/mcp"
  if conformance server --url "http://$front/mcp" --scenario "$scenario" -o "$work/results"; then
    passed=$((passed + 1))
  else
    failed+=("server:$scenario")
  fi
done
kill "$demo_pid" 2>/dev/null || true
wait "$demo_pid" 2>/dev/null || true
demo_pid=""

# --- client scenarios: the gateway as an MCP client --------------------------
# Each at the revision its server speaks: the gateway finds it by itself.
for run in "tools_call 2026-07-28" "initialize 2025-11-25" "tools_call 2025-11-25"; do
  read -r scenario version <<<"$run"
  echo "== client scenario $scenario at MCP $version"
  if conformance client --command "python3 $ROOT/tests/peers/conformance_client.py" \
      --scenario "$scenario" --spec-version "$version" --timeout 60000 -o "$work/results"; then
    passed=$((passed + 1))
  else
    failed+=("client:$scenario@$version")
  fi
done

echo
if [ ${#failed[@]} -eq 0 ]; then
  echo "MCP conformance: all $passed scenarios passed"
else
  echo "MCP conformance: $passed scenarios passed; failed: ${failed[*]}"
  exit 1
fi
