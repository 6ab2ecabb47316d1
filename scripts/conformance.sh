#!/usr/bin/env bash
# MCP's own conformance suite (npm @modelcontextprotocol/conformance) against
# the gateway, both ways:
#   - server scenarios against /mcp, with the SDK's MCP server behind it
#     (tests/peers/conformance_server.py): server-stateless, tools-list,
#     http-header-validation, caching and dns-rebinding-protection at MCP
#     2026-07-28; server-initialize, server-session-lifecycle, ping,
#     tools-list, server-sse-multiple-streams and dns-rebinding-protection
#     at 2025-11-25;
#   - client scenarios against the gateway as an MCP client, through
#     tests/peers/conformance_client.py, which starts the gateway with the
#     suite's server as an MCP upstream: tools_call at MCP 2026-07-28 (a
#     server without the handshake), initialize and tools_call at 2025-11-25.
# Installs the suite and the Node 22 it needs into .conformance/ first.
# The gateway binary: $OTC_GATEWAY_BIN, else target/debug/otc-gateway (built
# when missing). Exits 1 when any scenario fails.
source "$(dirname "$0")/lib.sh"
need_conformance
need_python_peers
cd "$ROOT"
PYTHON="${OTC_TEST_PYTHON:-$ROOT/.venv/bin/python}"

BIN="${OTC_GATEWAY_BIN:-$ROOT/target/debug/otc-gateway}"
if [ ! -x "$BIN" ]; then
  cargo build --bin otc-gateway
fi
export OTC_GATEWAY_BIN="$BIN"
# The suite's `node` shebang must find Node 22, not the system's.
export PATH="$ROOT/.conformance/node_modules/.bin:$PATH"

work="$(mktemp -d)"
gateway_pid=""
upstream_pid=""
cleanup() {
  for pid in $gateway_pid $upstream_pid; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

failed=()
passed=0

# --- server scenarios: the gateway's /mcp -----------------------------------
# Behind it, tests/peers/conformance_server.py: the SDK's MCP server in both
# eras as the upstream of toolkit `test`, so the gateway lists its tools
# under the names the scenarios look for (test_missing_capability, ...).
"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' >"$work/port"
upstream_port="$(cat "$work/port")"
"$PYTHON" "$ROOT/tests/peers/conformance_server.py" "$upstream_port" >"$work/upstream.out" 2>&1 &
upstream_pid=$!
cat >"$work/gateway.toml" <<TOML
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[[upstreams]]
name = "conformance"
url = "http://127.0.0.1:$upstream_port/mcp"
protocol = "mcp"
toolkit = "test"
version = "1.0.0"
TOML
"$BIN" --config "$work/gateway.toml" >"$work/gateway.out" 2>"$work/gateway.err" &
gateway_pid=$!
front=""
for _ in $(seq 1 200); do
  front="$(sed -n 's/^otc-gateway listening on \([0-9.:]*\) .*/\1/p' "$work/gateway.out" | head -n 1)"
  [ -n "$front" ] && break
  kill -0 "$gateway_pid" 2>/dev/null || { cat "$work/gateway.err" >&2; echo "the gateway exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$front" ] || { echo "the gateway did not start" >&2; exit 1; }
# Wait until the catalog has the upstream's tools.
for _ in $(seq 1 300); do
  python3 -c 'import json, sys, urllib.request
items = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))["items"]
sys.exit(0 if any(t["id"].startswith("test.trigger_tool_change@") for t in items) else 1)' \
    "http://$front/tools" 2>/dev/null && break
  sleep 0.1
done

# Each scenario at the revision it is for; those of both, once in each.
for run in "server-stateless 2026-07-28" "tools-list 2026-07-28" "http-header-validation 2026-07-28" \
    "caching 2026-07-28" "dns-rebinding-protection 2026-07-28" \
    "server-initialize 2025-11-25" "server-session-lifecycle 2025-11-25" "ping 2025-11-25" \
    "tools-list 2025-11-25" "server-sse-multiple-streams 2025-11-25" "dns-rebinding-protection 2025-11-25"; do
  read -r scenario version <<<"$run"
  echo "== server scenario $scenario at MCP $version against http://$front/mcp"
  if conformance server --url "http://$front/mcp" --scenario "$scenario" --spec-version "$version" -o "$work/results"; then
    passed=$((passed + 1))
  else
    failed+=("server:$scenario@$version")
  fi
done
kill "$gateway_pid" "$upstream_pid" 2>/dev/null || true
wait "$gateway_pid" "$upstream_pid" 2>/dev/null || true
gateway_pid=""
upstream_pid=""

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
