#!/usr/bin/env bash
# Runs every test. Installs what a fresh machine lacks first: cmake for
# pingora's build, and the third-party peers the tests talk to (Prometheus,
# Redis, nginx, Chromium, OpenBao, MCP's conformance suite, an OpenID Connect provider).
source "$(dirname "$0")/lib.sh"
need_build_tools
need_python_peers
need_prometheus
need_redis
need_nginx
need_chromium
need_openbao
need_deploy_tools
need_conformance
need_oidc_provider
need_mcp_inspector
need_octokit_openapi
cd "$ROOT"
# Guardrails before any test: the tree is formatted (rustfmt.toml) and
# clippy-clean, warnings refused.
cargo fmt --check
cargo clippy --locked --all-targets -j 2 -- -D warnings
export OTC_TEST_PYTHON="$ROOT/.venv/bin/python"
export OTC_TEST_LANGCHAIN_PYTHON="$ROOT/.venv-langchain/bin/python"
# Two cores: two test binaries' worth of gateways at a time is plenty.
exec cargo test --locked -j 2 "$@" -- --test-threads=2
