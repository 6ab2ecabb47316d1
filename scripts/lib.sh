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

# The Python peers the tests talk to, in .venv (pinned versions).
need_python_peers() {
  local venv="$ROOT/.venv"
  local stamp="$venv/.peers-installed"
  local wanted="$ROOT/tests/peers/requirements.txt"
  if [ -f "$stamp" ] && cmp -s "$stamp" "$wanted"; then return 0; fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$wanted"
  cp "$wanted" "$stamp"
}

# A real Prometheus server for tests/prometheus_scrape.rs (Debian's package).
need_prometheus() {
  command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || apt_install prometheus
}
