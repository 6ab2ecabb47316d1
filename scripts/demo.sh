#!/usr/bin/env bash
# Runs the demo: the gateway and two example tool servers on loopback.
# Installs cmake first when missing (pingora's build needs it).
source "$(dirname "$0")/lib.sh"
need_build_tools
cd "$ROOT"
exec cargo run --release --locked -- demo "$@"
