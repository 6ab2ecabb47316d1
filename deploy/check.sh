#!/usr/bin/env bash
# deploy/check.sh: checks every deployment file in deploy/. Exits non-zero
# when a check fails; a check whose tool is absent is skipped with a line
# saying so (except promtool and PyYAML, which are required).
#
#   deploy/check.sh                     run the checks
#   deploy/check.sh --update-manifests  re-render deploy/kubernetes/otc-gateway.yaml from the chart
#
# Environment:
#   OTC_GATEWAY_BIN  the otc-gateway binary: `otc-gateway check` runs on every
#                    gateway.toml shipped here (tests/deploy_files.rs sets it)
#
# Tools: promtool (Debian's prometheus package), python3 with PyYAML;
# optionally, from .venv-deploy (deploy/requirements.txt): hadolint,
# kubernetes-validate and helm-python-sdk (Helm's engine, through
# deploy/tools/helm_chart.py); systemd-analyze. scripts/test.sh installs them.
set -uo pipefail

DEPLOY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$DEPLOY")"
CHART="$DEPLOY/helm/otc-gateway"
MANIFEST="$DEPLOY/kubernetes/otc-gateway.yaml"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

failures=()
skips=()
step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok    %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*" >&2; failures+=("$*"); }
skip() { printf 'skip  %s\n' "$*"; skips+=("$*"); }

update_manifests=0
case "${1:-}" in
  "") ;;
  --update-manifests) update_manifests=1 ;;
  *) echo "usage: deploy/check.sh [--update-manifests]" >&2; exit 2 ;;
esac

# --- tools -----------------------------------------------------------------

PY=""
for candidate in "$ROOT/.venv-deploy/bin/python" python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import yaml' 2>/dev/null; then
    PY="$candidate"
    break
  fi
done
if [ -z "$PY" ]; then
  echo "FAIL  no python3 with PyYAML: run scripts/test.sh (it builds .venv-deploy), or apt-get install python3-yaml" >&2
  exit 1
fi
checks() { "$PY" "$DEPLOY/tools/checks.py" "$@"; }

if ! command -v promtool >/dev/null 2>&1; then
  echo "FAIL  promtool not found: apt-get install prometheus (Debian's package ships promtool); scripts/test.sh does" >&2
  exit 1
fi

tool() { # tool NAME: the path of NAME, on PATH or in .venv-deploy
  if [ -x "$ROOT/.venv-deploy/bin/$1" ]; then echo "$ROOT/.venv-deploy/bin/$1"; return 0; fi
  command -v "$1" 2>/dev/null
}

# --- the Helm chart, rendered ----------------------------------------------

step "Helm chart: lint and render"
# Helm v4's own engine, from helm-python-sdk (a wheel with Helm's Go SDK as a
# shared library): no helm binary and no Go toolchain needed.
HELM_PY=""
helm_broken=0
for candidate in "$ROOT/.venv-deploy/bin/python" "$PY"; do
  [ -x "$(command -v "$candidate" 2>/dev/null)" ] || continue
  if probe="$("$candidate" "$DEPLOY/tools/helm_chart.py" version 2>&1)"; then
    HELM_PY="$candidate"
    ok "$probe"
    break
  elif ! grep -q "No module named 'helm_python'" <<<"$probe"; then
    # Installed but not loading (say, a wheel for another platform): say why.
    echo "$probe" >&2
    fail "helm-python-sdk does not load with $candidate: the chart was not linted or rendered"
    helm_broken=1
    break
  fi
done
helm_chart() { "$HELM_PY" "$DEPLOY/tools/helm_chart.py" "$@"; }
render() { helm_chart render "$CHART" --name otc-gateway --namespace default "$@"; }
RENDER="helm template (Helm's engine)"

RENDERED=()
if [ -n "$HELM_PY" ]; then
  if helm_chart lint "$CHART" >"$TMP/lint.log" 2>&1; then
    ok "helm lint --strict: default values"
  else
    cat "$TMP/lint.log" >&2
    fail "helm lint --strict: default values (Helm's linter refused the chart, above)"
  fi
  if helm_chart lint "$CHART" -f "$CHART/ci/production-values.yaml" >"$TMP/lint.log" 2>&1; then
    ok "helm lint --strict: ci/production-values.yaml"
  else
    cat "$TMP/lint.log" >&2
    fail "helm lint --strict: ci/production-values.yaml (Helm's linter refused the chart, above)"
  fi
  if render >"$TMP/default.yaml" 2>"$TMP/render.log"; then
    ok "$RENDER: default values"
    RENDERED+=("$TMP/default.yaml")
  else
    cat "$TMP/render.log" >&2
    fail "$RENDER: default values (the chart does not render, above)"
  fi
  if render -f "$CHART/ci/production-values.yaml" >"$TMP/production.yaml" 2>"$TMP/render.log"; then
    ok "$RENDER: ci/production-values.yaml (Secrets as env and files, Redis, ServiceMonitor)"
    RENDERED+=("$TMP/production.yaml")
  else
    cat "$TMP/render.log" >&2
    fail "$RENDER: ci/production-values.yaml (the chart does not render, above)"
  fi
  # redis.enabled with an [idempotency] of one's own must be refused, not doubled.
  printf 'redis:\n  enabled: true\nconfig: |\n  [idempotency]\n  ttl = "1m"\n' >"$TMP/conflict-values.yaml"
  if render -f "$TMP/conflict-values.yaml" >/dev/null 2>"$TMP/render.log"; then
    fail "$RENDER: redis.enabled with [idempotency] in config should fail to render"
  elif grep -q 'the chart writes the \[idempotency\] section itself' "$TMP/render.log"; then
    ok "$RENDER: redis.enabled with [idempotency] in config is refused with a message"
  else
    cat "$TMP/render.log" >&2
    fail "$RENDER: redis.enabled with [idempotency] in config failed for another reason"
  fi
  # The old values' service.adminPort (the admin port on the data Service) is refused, not ignored.
  printf 'service:\n  adminPort: 9464\n' >"$TMP/admin-port-values.yaml"
  if render -f "$TMP/admin-port-values.yaml" >/dev/null 2>"$TMP/render.log"; then
    fail "$RENDER: service.adminPort should fail to render"
  elif grep -q 'service.adminPort is gone' "$TMP/render.log"; then
    ok "$RENDER: service.adminPort (the admin port on the data Service) is refused with a message"
  else
    cat "$TMP/render.log" >&2
    fail "$RENDER: service.adminPort failed for another reason"
  fi
  if [ -f "$TMP/default.yaml" ] && [ -s "$TMP/default.yaml" ]; then
    # What deploy/kubernetes/otc-gateway.yaml must hold, byte for byte.
    {
      echo "# otc-gateway for Kubernetes without Helm: deploy/helm/otc-gateway rendered"
      echo "# with its default values (release name \"otc-gateway\")."
      echo "# Rendered by Helm's engine (helm-python-sdk, deploy/tools/helm_chart.py) as"
      echo "# \`helm template otc-gateway deploy/helm/otc-gateway --namespace default\` renders it."
      echo "# Regenerate with deploy/check.sh --update-manifests; deploy/check.sh fails"
      echo "# when this file and the chart disagree. To use it: copy it, put your"
      echo "# upstreams in the ConfigMap's gateway.toml and your registry in the image,"
      echo "# and apply it to a namespace of yours:"
      echo "#   kubectl create namespace tools"
      echo "#   kubectl -n tools apply -f otc-gateway.yaml"
      echo "# Later edits of gateway.toml, applied the same way, are hot-reloaded by the"
      echo "# running pods (no restart). See deploy/README.md."
      cat "$TMP/default.yaml"
    } >"$TMP/manifest.yaml"
    if [ $update_manifests = 1 ]; then
      mkdir -p "$(dirname "$MANIFEST")"
      cp "$TMP/manifest.yaml" "$MANIFEST"
      ok "wrote $MANIFEST"
    fi
    if ! checks same "$TMP/default.yaml" "$MANIFEST"; then
      fail "deploy/kubernetes/otc-gateway.yaml differs from the chart's default rendering"
    elif ! cmp -s "$TMP/manifest.yaml" "$MANIFEST"; then
      # Same objects, other text (comments, order, blank lines): still stale.
      diff -u "$MANIFEST" "$TMP/manifest.yaml" | head -n 40 >&2
      fail "deploy/kubernetes/otc-gateway.yaml is not the chart's rendering as Helm prints it (run deploy/check.sh --update-manifests)"
    else
      ok "deploy/kubernetes/otc-gateway.yaml is the chart's default rendering"
    fi
  fi
elif [ $helm_broken = 0 ]; then
  skip "chart lint and rendering: helm-python-sdk not installed (.venv-deploy, from deploy/requirements.txt; scripts/test.sh installs it): the chart's templates were not rendered"
fi

# --- YAML and JSON parse ---------------------------------------------------

step "YAML and JSON parse"
# Helm templates are not YAML until rendered: everything else is.
mapfile -t FILES < <(find "$DEPLOY" \( -path "$CHART/templates" -prune \) -o -type f \( -name '*.yaml' -o -name '*.yml' -o -name '*.json' \) -print | sort)
if checks parse "${FILES[@]}" "${RENDERED[@]}"; then
  ok "${#FILES[@]} files in deploy/ (and ${#RENDERED[@]} renderings) parse"
else
  fail "YAML/JSON parse"
fi

# --- Kubernetes manifests --------------------------------------------------

step "Kubernetes manifests"
if checks manifests "$MANIFEST" "${RENDERED[@]}"; then
  ok "probes on /health, ConfigMap mounted as a directory (no subPath, no checksum restart), ports, selectors, Secrets wiring"
  ok "the admin port: admin_token from a Secret, not on the data Service (a ClusterIP Service of its own), only the NetworkPolicy's named sources reach it"
else
  fail "Kubernetes manifests break a promise of the chart"
fi
KV="$(tool kubernetes-validate || true)"
if [ -n "$KV" ]; then
  schema_dir="$("$(dirname "$KV")/python" -c 'import kubernetes_validate, os; print(os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema"))' 2>/dev/null || true)"
  versions="$(checks k8s-schema-versions "$schema_dir" 2>/dev/null || echo 1.30.0)"
  for v in $versions; do
    # ServiceMonitor is a CRD: kubernetes-validate has no schema for it (a warning, not a failure).
    if "$KV" --strict --quiet --no-warn -k "$v" "$MANIFEST" "${RENDERED[@]}" >"$TMP/kv.log" 2>&1; then
      ok "kubernetes-validate --strict against Kubernetes $v"
    else
      cat "$TMP/kv.log" >&2
      fail "kubernetes-validate --strict against Kubernetes $v"
    fi
  done
else
  skip "kubernetes-validate not installed (.venv-deploy, from deploy/requirements.txt): manifests not checked against the Kubernetes schemas"
fi

# --- gateway.toml files ----------------------------------------------------

step "gateway.toml files"
if [ -n "${OTC_GATEWAY_BIN:-}" ]; then
  mapfile -t CONFIGS < <(checks configs "$TMP/configs" "$MANIFEST" "${RENDERED[@]}")
  CONFIGS+=("$DEPLOY/docker/gateway.toml")
  for config in "${CONFIGS[@]}"; do
    if ! "$OTC_GATEWAY_BIN" check --config "$config" >"$TMP/check.log" 2>&1; then
      cat "$TMP/check.log" >&2
      fail "otc-gateway check: ${config#"$TMP/configs/"}"
    elif grep -q 'serves only /health and /metrics' "$TMP/check.log"; then
      # A shipped config whose admin listener would answer nobody but probes.
      cat "$TMP/check.log" >&2
      fail "otc-gateway check: ${config#"$TMP/configs/"} has a non-loopback admin listener without admin_token"
    else
      ok "otc-gateway check: ${config#"$TMP/configs/"}"
    fi
  done
else
  skip "OTC_GATEWAY_BIN not set: the shipped gateway.toml files were not validated with otc-gateway check"
fi

# --- Prometheus ------------------------------------------------------------

step "Prometheus rules and config"
if promtool check rules "$DEPLOY/prometheus/alerts.yml"; then
  ok "promtool check rules deploy/prometheus/alerts.yml"
else
  fail "promtool check rules deploy/prometheus/alerts.yml"
fi
if promtool test rules "$DEPLOY/prometheus/alerts_test.yml"; then
  ok "promtool test rules deploy/prometheus/alerts_test.yml (each alert fires when it should, and only then)"
else
  fail "promtool test rules deploy/prometheus/alerts_test.yml"
fi
if promtool check config "$DEPLOY/prometheus/prometheus.yml"; then
  ok "promtool check config deploy/prometheus/prometheus.yml"
else
  fail "promtool check config deploy/prometheus/prometheus.yml"
fi
if promtool check config "$DEPLOY/prometheus/prometheus-kubernetes.yml" >"$TMP/k8s-config.log" 2>&1; then
  ok "promtool check config deploy/prometheus/prometheus-kubernetes.yml"
elif grep -q 'kubernetes_sd_configs not found' "$TMP/k8s-config.log"; then
  # Debian builds Prometheus without Kubernetes discovery: check the rest.
  cp "$DEPLOY/prometheus/alerts.yml" "$TMP/alerts.yml"
  if checks kubernetes-sd-as-static "$DEPLOY/prometheus/prometheus-kubernetes.yml" "$TMP/prometheus-kubernetes.yml" &&
    promtool check config "$TMP/prometheus-kubernetes.yml"; then
    ok "promtool check config deploy/prometheus/prometheus-kubernetes.yml (this promtool lacks Kubernetes discovery: kubernetes_sd_configs swapped for a static target)"
  else
    fail "promtool check config deploy/prometheus/prometheus-kubernetes.yml"
  fi
else
  cat "$TMP/k8s-config.log" >&2
  fail "promtool check config deploy/prometheus/prometheus-kubernetes.yml"
fi

step "Grafana dashboard queries"
if checks grafana-rules "$DEPLOY/grafana/otc-gateway.json" "$TMP/dashboard-rules.yml" &&
  promtool check rules "$TMP/dashboard-rules.yml"; then
  ok "every query of deploy/grafana/otc-gateway.json parses as PromQL (promtool)"
else
  fail "a query of deploy/grafana/otc-gateway.json does not parse"
fi
if checks metric-names "$ROOT/src/metrics.rs" "$DEPLOY/grafana/otc-gateway.json" "$DEPLOY/prometheus/alerts.yml"; then
  ok "the dashboard and the alerts use only metrics the gateway exports"
else
  fail "the dashboard or the alerts use a metric the gateway does not export"
fi

# --- Docker ----------------------------------------------------------------

step "Dockerfile"
if bash -n "$DEPLOY/docker/healthcheck"; then
  ok "deploy/docker/healthcheck: bash syntax"
else
  fail "deploy/docker/healthcheck: bash syntax"
fi
# Every file the Dockerfile copies from the build context (the repository root) exists.
missing=0
while read -r src; do
  if [ ! -e "$ROOT/$src" ]; then
    echo "  deploy/Dockerfile copies $src, which does not exist" >&2
    missing=1
  fi
done < <(awk '/^COPY/ && !/--from=/ { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' "$DEPLOY/Dockerfile")
if [ $missing = 0 ]; then ok "deploy/Dockerfile: every COPY source exists"; else fail "deploy/Dockerfile: COPY of a missing file"; fi
if checks docker-config "$DEPLOY/docker/gateway.toml"; then
  ok "deploy/docker/gateway.toml: the admin token from a Docker secret"
else
  fail "deploy/docker/gateway.toml: no admin_token from a Docker secret (file:/run/secrets/...)"
fi
HADOLINT="$(tool hadolint || true)"
if [ -n "$HADOLINT" ]; then
  if "$HADOLINT" "$DEPLOY/Dockerfile"; then
    ok "hadolint deploy/Dockerfile"
  else
    fail "hadolint deploy/Dockerfile"
  fi
else
  skip "hadolint not installed (.venv-deploy, from deploy/requirements.txt): deploy/Dockerfile not linted"
fi

# --- systemd ---------------------------------------------------------------

step "systemd unit"
UNIT="$DEPLOY/systemd/otc-gateway.service"
if ! command -v systemd-analyze >/dev/null 2>&1; then
  skip "systemd-analyze not available: deploy/systemd/otc-gateway.service not verified"
else
  # verify insists that every Exec*= binary exists: point them at this build
  # of otc-gateway (or a stand-in) in a copy of the unit.
  mkdir -p "$TMP/systemd"
  bin="${OTC_GATEWAY_BIN:-}"
  if [ -z "$bin" ]; then
    bin="$TMP/systemd/otc-gateway"
    printf '#!/bin/sh\nexit 0\n' >"$bin"
    chmod +x "$bin"
  fi
  sed "s#/usr/local/bin/otc-gateway#$bin#g" "$UNIT" >"$TMP/systemd/otc-gateway.service"
  printf '[Service]\nExecStart=/bin/true\n' >"$TMP/systemd/probe.service"
  if ! systemd-analyze verify "$TMP/systemd/probe.service" >"$TMP/probe.log" 2>&1 || [ -s "$TMP/probe.log" ]; then
    skip "systemd-analyze cannot run in this container ($(head -n1 "$TMP/probe.log")): the unit was not verified"
  else
    # verify exits 0 on unknown keys and bad values, with a warning: any output is a failure.
    systemd-analyze verify "$TMP/systemd/otc-gateway.service" >"$TMP/verify.log" 2>&1
    status=$?
    if [ $status = 0 ] && [ ! -s "$TMP/verify.log" ]; then
      ok "systemd-analyze verify deploy/systemd/otc-gateway.service"
    else
      cat "$TMP/verify.log" >&2
      fail "systemd-analyze verify deploy/systemd/otc-gateway.service"
    fi
    # shellcheck disable=SC2016 # $MAINPID is systemd's, written as is in the unit
    for key in DynamicUser=yes ProtectSystem=strict 'ExecReload=/bin/kill -HUP $MAINPID'; do
      if ! grep -qxF "$key" "$UNIT"; then
        fail "deploy/systemd/otc-gateway.service lacks $key"
      fi
    done
  fi
fi

# --- summary ---------------------------------------------------------------

echo
if [ ${#skips[@]} -gt 0 ]; then
  echo "skipped ${#skips[@]}:"
  printf '  %s\n' "${skips[@]}"
fi
if [ ${#failures[@]} -gt 0 ]; then
  echo "FAILED ${#failures[@]}:" >&2
  printf '  %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "deploy/check.sh: all checks passed"
