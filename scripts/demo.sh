#!/usr/bin/env bash
# Runs the demo: the gateway and two example tool servers on loopback.
# Installs cmake first when missing (pingora's build needs it).
#
# Built with the `demo` profile (Cargo.toml): no optimisation, no LTO, no
# debug info, so a first run compiles in a few minutes on 2 cores
# (benches/README.md, "Builds"). The fully optimised build, for production
# and benchmarks, is scripts/build-release.sh (and deploy/Dockerfile).
source "$(dirname "$0")/lib.sh"
need_build_tools
cd "$ROOT"
exec cargo run --profile demo --locked -- demo "$@"
