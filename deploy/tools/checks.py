"""The checks of deploy/check.sh that need a YAML parser. Python 3 + PyYAML.

    checks.py parse FILE...                 every YAML document parses (JSON for .json)
    checks.py grafana-rules DASHBOARD OUT   every PromQL query of the dashboard, as a rules file for promtool
    checks.py metric-names METRICS_RS FILE...  the otc_gateway_* names used exist (in the contract and src/metrics.rs)
    checks.py manifests FILE...             the rendered chart keeps its promises (probes, mounts, ports, the
                                            admin port's Service, token and NetworkPolicy, ...)
    checks.py docker-config FILE            the image's gateway.toml reads its admin token from a Docker secret
    checks.py same RENDERED COMMITTED       two manifest files hold the same objects
    checks.py configs OUTDIR FILE...        write each ConfigMap's gateway.toml to OUTDIR, print the paths
    checks.py k8s-schema-versions DIR       the oldest and newest Kubernetes versions kubernetes-validate knows
    checks.py kubernetes-sd-as-static IN OUT  swap kubernetes_sd_configs for a static target
"""

import json
import os
import re
import sys

import yaml

# The metric names the gateway exports (the contract; README.md "Metrics").
KNOWN_METRICS = {
    "otc_gateway_http_requests_total",
    "otc_gateway_tool_calls_total",
    "otc_gateway_tool_call_duration_seconds",
    "otc_gateway_upstream_up",
    "otc_gateway_catalog_tools",
    "otc_gateway_config_reloads_total",
    "otc_gateway_config_generation",
    "otc_gateway_vault_requests_total",
    "otc_gateway_vault_stale_served_total",
}
HISTOGRAMS = {"otc_gateway_tool_call_duration_seconds"}

# Grafana's variables, as a query would see them with "All" selected.
GRAFANA_VARS = {
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def cmd_parse(paths):
    bad = 0
    for path in paths:
        try:
            if path.endswith(".json"):
                with open(path, encoding="utf-8") as f:
                    json.load(f)
                n = 1
            else:
                n = len(load_docs(path))
                if n == 0:
                    raise ValueError("no YAML document in it")
            print(f"  parsed {path} ({n} document{'s' if n != 1 else ''})")
        except Exception as e:  # noqa: BLE001 - report every failure
            print(f"  {path}: {e}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


def substitute(expr):
    def var(m):
        name = m.group(1) or m.group(2)
        return GRAFANA_VARS.get(name, ".*")

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", var, expr)


def dashboard_queries(dashboard):
    """(where, PromQL) for every query of the dashboard."""
    out = []

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            if "expr" in t:
                out.append((f"panel {p.get('title')!r} {t.get('refId')}", t["expr"]))
    for a in dashboard.get("annotations", {}).get("list", []):
        if "expr" in a:
            out.append((f"annotation {a.get('name')!r}", a["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", q or "")
        if not m:
            raise ValueError(f"variable {v.get('name')}: not label_values(selector, label): {q!r}")
        out.append((f"variable {v.get('name')!r}", m.group(1)))
    return out


def cmd_grafana_rules(dashboard_path, out_path):
    with open(dashboard_path, encoding="utf-8") as f:
        dashboard = json.load(f)
    queries = dashboard_queries(dashboard)
    if not queries:
        print(f"  {dashboard_path}: no queries found", file=sys.stderr)
        return 1
    rules = []
    for i, (where, expr) in enumerate(queries):
        concrete = substitute(expr)
        if "$" in concrete:
            print(f"  {where}: a variable is left after substitution: {concrete}", file=sys.stderr)
            return 1
        rules.append({"record": f"dashboard:query_{i}", "expr": concrete, "labels": {"where": where}})
    with open(out_path, "w", encoding="utf-8") as f:
        yaml.safe_dump({"groups": [{"name": "grafana-dashboard", "rules": rules}]}, f, sort_keys=False, width=1000)
    print(f"  {len(rules)} queries from {dashboard_path}")
    return 0


def queries_of(path):
    """(where, PromQL) of a Grafana dashboard (.json) or a rules file."""
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return dashboard_queries(json.load(f))
    out = []
    for doc in load_docs(path):
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                out.append((rule.get("alert") or rule.get("record"), rule["expr"]))
    return out


def cmd_metric_names(metrics_rs, paths):
    bad = 0
    with open(metrics_rs, encoding="utf-8") as f:
        source = f.read()
    for name in sorted(KNOWN_METRICS):
        if f'"{name}"' not in source:
            print(f"  {name}: in the contract but not registered in {metrics_rs}", file=sys.stderr)
            bad += 1
    used = set()
    for path in paths:
        text = "\n".join(expr for _, expr in queries_of(path))
        for name in set(re.findall(r"\botc_gateway_[a-z0-9_]+", text)):
            used.add(name)
            base = name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in HISTOGRAMS:
                    base = name[: -len(suffix)]
            if base not in KNOWN_METRICS:
                print(f"  {path}: unknown metric {name}", file=sys.stderr)
                bad += 1
            elif base in HISTOGRAMS and base == name:
                print(f"  {path}: {name} is a histogram: query _bucket, _sum or _count", file=sys.stderr)
                bad += 1
    print(f"  {len(used)} metric names used, all exported")
    return 1 if bad else 0


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d.get("kind"), []).append(d)
    return out


def cmd_manifests(paths):
    bad = []
    for path in paths:
        docs = load_docs(path)
        for d in docs:
            if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") or not d.get("metadata", {}).get("name"):
                bad.append(f"{path}: a document without apiVersion, kind or metadata.name")
        kinds = by_kind(docs)
        for kind in ("ConfigMap", "Deployment", "ServiceAccount", "NetworkPolicy"):
            if len(kinds.get(kind, [])) != 1:
                bad.append(f"{path}: expected one {kind}, found {len(kinds.get(kind, []))}")
        if bad:
            continue
        dep = kinds["Deployment"][0]
        pod = dep["spec"]["template"]
        spec = pod["spec"]
        (container,) = spec["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        if set(ports) != {"http", "admin"}:
            bad.append(f"{path}: container ports {sorted(ports)}, want http and admin")
            continue
        for probe in ("readinessProbe", "livenessProbe"):
            get = container.get(probe, {}).get("httpGet", {})
            if get.get("path") != "/health" or get.get("port") not in ("http", ports["http"]):
                bad.append(f"{path}: {probe} must GET /health on the http port, is {get}")
        annotations = pod.get("metadata", {}).get("annotations") or {}
        for key in annotations:
            if key.startswith("checksum/"):
                bad.append(f"{path}: pod annotation {key} would restart pods on every config change (hot reload makes it unneeded)")
        configmap = kinds["ConfigMap"][0]
        config_volumes = [v["name"] for v in spec.get("volumes", []) if v.get("configMap", {}).get("name") == configmap["metadata"]["name"]]
        mounts = [m for m in container.get("volumeMounts", []) if m["name"] in config_volumes]
        if len(mounts) != 1:
            bad.append(f"{path}: the ConfigMap must be mounted once, is {len(mounts)} times")
        else:
            m = mounts[0]
            if m.get("subPath") or m.get("subPathExpr"):
                bad.append(f"{path}: the ConfigMap is mounted with subPath: its updates never reach the pod")
            if m["mountPath"].rstrip("/") != "/etc/otc-gateway":
                bad.append(f"{path}: the ConfigMap is mounted at {m['mountPath']}, want /etc/otc-gateway")
        args = container.get("args", [])
        if "--config" not in args or args[args.index("--config") + 1] != "/etc/otc-gateway/gateway.toml":
            bad.append(f"{path}: args must pass --config /etc/otc-gateway/gateway.toml, are {args}")
        toml = configmap.get("data", {}).get("gateway.toml", "")
        for key, port in (("listen", ports["http"]), ("admin_listen", ports["admin"])):
            m = re.search(rf'(?m)^\s*{key}\s*=\s*"([^"]*)"', toml)
            if not m or not m.group(1).endswith(f":{port}") or not m.group(1).startswith(("0.0.0.0:", "[::]:")):
                bad.append(f"{path}: gateway.toml {key} must be 0.0.0.0:{port} (the containerPort), is {m.group(1) if m else 'absent'}")
        selector = dep["spec"]["selector"]["matchLabels"]
        labels = pod["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in selector.items()):
            bad.append(f"{path}: Deployment selector and pod labels disagree")
        bad += services(path, kinds.get("Service", []), ports, selector)
        bad += admin_token(path, toml, container, spec)
        bad += network_policy(path, kinds["NetworkPolicy"][0], labels, ports)
        sc = {**(spec.get("securityContext") or {}), **(container.get("securityContext") or {})}
        if not sc.get("runAsNonRoot") or sc.get("allowPrivilegeEscalation") is not False or not sc.get("readOnlyRootFilesystem"):
            bad.append(f"{path}: the container must run as non-root, read-only, without privilege escalation")
        grace = spec.get("terminationGracePeriodSeconds", 30)
        if grace <= 30:
            bad.append(f"{path}: terminationGracePeriodSeconds {grace} leaves no room for shutdown_timeout (30s) plus preStop")
        for hpa in kinds.get("HorizontalPodAutoscaler", []):
            if "replicas" in dep["spec"]:
                bad.append(f"{path}: with an HPA the Deployment must not set replicas (each apply would reset the HPA's count)")
            if hpa["spec"]["scaleTargetRef"]["name"] != dep["metadata"]["name"]:
                bad.append(f"{path}: the HPA scales {hpa['spec']['scaleTargetRef']['name']}, not the Deployment")
        for pdb in kinds.get("PodDisruptionBudget", []):
            if pdb["spec"]["selector"]["matchLabels"] != selector:
                bad.append(f"{path}: the PodDisruptionBudget selects other pods")
        for sm in kinds.get("ServiceMonitor", []):
            endpoints = sm["spec"]["endpoints"]
            wanted = sm["spec"]["selector"]["matchLabels"]
            picked = [svc["metadata"]["name"] for svc in kinds.get("Service", [])
                      if all(svc["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())]
            admin_services = [svc["metadata"]["name"] for svc in kinds.get("Service", [])
                              if [p["name"] for p in svc["spec"]["ports"]] == ["admin"]]
            if [e.get("port") for e in endpoints] != ["admin"] or picked != admin_services or not picked:
                bad.append(f"{path}: the ServiceMonitor must scrape the admin Service's admin port (it selects {picked})")
        env_names = [e["name"] for e in container.get("env", [])]
        secret_env = [e["name"] for e in container.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
        secret_mounts = [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] not in config_volumes]
        if len(env_names) != len(set(env_names)):
            bad.append(f"{path}: duplicate environment variables {env_names}")
        live = "\n".join(line for line in toml.splitlines() if not line.lstrip().startswith("#"))
        for ref in re.findall(r'"(env|file):([^"]+)"', live):
            kind, target = ref
            if kind == "env" and target not in env_names:
                bad.append(f"{path}: gateway.toml reads env:{target}, which the pod does not set")
            if kind == "file" and not any(target.startswith(mp.rstrip("/") + "/") for mp in secret_mounts):
                bad.append(f"{path}: gateway.toml reads file:{target}, which no mounted Secret provides")
        print(f"  {path}: {', '.join(sorted(k for k in kinds if k))}; {len(secret_env)} env and {len(secret_mounts)} file Secrets wired")
    for b in bad:
        print(f"  {b}", file=sys.stderr)
    return 1 if bad else 0


def services(path, svcs, ports, selector):
    """One data Service, with the http port only (it may be exposed), and the
    admin port, if on a Service at all, on a ClusterIP Service of its own."""
    bad = []
    def exposes_admin(port):
        return port.get("name") == "admin" or port.get("targetPort") in ("admin", ports["admin"]) or port.get("port") == ports["admin"]
    data = [s for s in svcs if any(p.get("targetPort") in ("http", ports["http"]) for p in s["spec"]["ports"])]
    if len(data) != 1:
        return [f"{path}: expected one Service for the data port, found {len(data)}"]
    for svc in svcs:
        name = svc["metadata"]["name"]
        if svc["spec"].get("selector") != selector:
            bad.append(f"{path}: Service {name} selects other pods than the Deployment's")
        svc_ports = {p["name"]: p.get("targetPort") for p in svc["spec"]["ports"]}
        if svc is data[0]:
            if svc_ports != {"http": "http"}:
                bad.append(f"{path}: the data Service {name} has ports {svc_ports}, want http alone: the admin "
                           "port must not be on it (it is the Service that gets exposed)")
        elif any(exposes_admin(p) for p in svc["spec"]["ports"]):
            if svc_ports != {"admin": "admin"} or svc["spec"].get("type", "ClusterIP") != "ClusterIP":
                bad.append(f"{path}: the admin Service {name} must be ClusterIP with the admin port alone, "
                           f"is {svc['spec'].get('type')} with {svc_ports}")
    return bad


def admin_token(path, toml, container, spec):
    """[server] admin_token is set, and read from a Kubernetes Secret: an env
    variable filled by a secretKeyRef, or a file of a mounted Secret."""
    section = re.search(r"(?ms)^\s*\[server\]\s*$(.*?)(?=^\s*\[)", toml + "\n[end]")
    m = section and re.search(r'(?m)^\s*admin_token\s*=\s*"(env|file):([^"]+)"', section.group(1))
    if not m:
        return [f"{path}: gateway.toml's [server] sets no admin_token = \"env:...\" or \"file:...\": every admin read "
                "would be open to the cluster, or (non-loopback) refused"]
    kind, target = m.groups()
    if kind == "env":
        env = [e for e in container.get("env", []) if e["name"] == target]
        if not env or "secretKeyRef" not in (env[0].get("valueFrom") or {}):
            return [f"{path}: admin_token reads env:{target}, which is not set from a Secret (secretKeyRef)"]
        return []
    secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
    mounts = [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in secret_volumes]
    if not any(target.startswith(mp.rstrip("/") + "/") for mp in mounts):
        return [f"{path}: admin_token reads file:{target}, which no mounted Secret provides"]
    return []


def network_policy(path, policy, pod_labels, ports):
    """A NetworkPolicy on the gateway's pods whose every ingress rule that
    reaches the admin port names its sources, none of them "everyone"."""
    bad = []
    spec = policy["spec"]
    selects = spec.get("podSelector", {}).get("matchLabels") or {}
    if not selects or any(pod_labels.get(k) != v for k, v in selects.items()):
        bad.append(f"{path}: the NetworkPolicy does not select the gateway's pods ({selects})")
    if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
        bad.append(f"{path}: the NetworkPolicy does not restrict ingress")
    def reaches_admin(rule):
        rule_ports = rule.get("ports") or []
        return not rule_ports or any(p.get("port") in (None, "admin", ports["admin"]) for p in rule_ports)
    def everyone(peer):
        # An empty selector is every pod (of the namespace, or of the cluster).
        block = (peer.get("ipBlock") or {}).get("cidr")
        selectors = [peer.get("namespaceSelector") or {}, peer.get("podSelector") or {}]
        narrowed = any(s.get("matchLabels") or s.get("matchExpressions") for s in selectors)
        return block in ("0.0.0.0/0", "::/0") or ("ipBlock" not in peer and not narrowed)
    for i, rule in enumerate(spec.get("ingress") or []):
        if not reaches_admin(rule):
            continue
        peers = rule.get("from") or []
        if not peers or any(everyone(p) for p in peers):
            bad.append(f"{path}: NetworkPolicy ingress rule {i} lets every source reach the admin port: name its sources")
    return bad


def cmd_docker_config(path):
    """The image's gateway.toml: a non-loopback admin listener with its token
    read from a Docker secret (a file under /run/secrets)."""
    with open(path, encoding="utf-8") as f:
        toml = f.read()
    live = "\n".join(line.split("#", 1)[0] for line in toml.splitlines())
    m = re.search(r'(?m)^\s*admin_token\s*=\s*"file:(/run/secrets/[^"]+)"', live)
    if not m:
        print(f"  {path}: [server] admin_token must read a Docker secret (\"file:/run/secrets/...\")", file=sys.stderr)
        return 1
    print(f"  {path}: admin_token from the Docker secret {m.group(1)}")
    return 0


def normalize_objects(path):
    docs = load_docs(path)
    return sorted((json.dumps(d, sort_keys=True) for d in docs))


def cmd_same(rendered, committed):
    a, b = normalize_objects(rendered), normalize_objects(committed)
    if a == b:
        print(f"  {committed} holds the same {len(a)} objects as the chart renders")
        return 0
    ja = {(json.loads(x)["kind"], json.loads(x)["metadata"]["name"]): json.loads(x) for x in a}
    jb = {(json.loads(x)["kind"], json.loads(x)["metadata"]["name"]): json.loads(x) for x in b}
    for key in sorted(set(ja) | set(jb)):
        if ja.get(key) != jb.get(key):
            print(f"  {committed}: {key[0]} {key[1]} differs from the chart's rendering", file=sys.stderr)
    print(f"  regenerate it: deploy/check.sh --update-manifests", file=sys.stderr)
    return 1


def cmd_configs(outdir, paths):
    os.makedirs(outdir, exist_ok=True)
    n = 0
    for path in paths:
        for d in load_docs(path):
            if d.get("kind") == "ConfigMap" and "gateway.toml" in (d.get("data") or {}):
                n += 1
                name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{os.path.basename(path)}-{d['metadata']['name']}")
                out = os.path.join(outdir, name, "gateway.toml")
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out, "w", encoding="utf-8") as f:
                    f.write(d["data"]["gateway.toml"])
                print(out)
    return 0 if n else 1


def cmd_k8s_schema_versions(schema_dir):
    versions = []
    for entry in os.listdir(schema_dir):
        m = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", entry)
        if m:
            versions.append(tuple(int(x) for x in m.groups()))
    versions.sort()
    if not versions:
        return 1
    print(" ".join(".".join(map(str, v)) for v in sorted({versions[0], versions[-1]})))
    return 0


def cmd_kubernetes_sd_as_static(src, dst):
    with open(src, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    swapped = 0
    for job in config.get("scrape_configs", []):
        if "kubernetes_sd_configs" in job:
            del job["kubernetes_sd_configs"]
            job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
            swapped += 1
    with open(dst, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return 0 if swapped else 1


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "parse":
        return cmd_parse(args)
    if cmd == "grafana-rules":
        return cmd_grafana_rules(*args)
    if cmd == "metric-names":
        return cmd_metric_names(args[0], args[1:])
    if cmd == "manifests":
        return cmd_manifests(args)
    if cmd == "docker-config":
        return cmd_docker_config(*args)
    if cmd == "same":
        return cmd_same(*args)
    if cmd == "configs":
        return cmd_configs(args[0], args[1:])
    if cmd == "k8s-schema-versions":
        return cmd_k8s_schema_versions(*args)
    if cmd == "kubernetes-sd-as-static":
        return cmd_kubernetes_sd_as_static(*args)
    print(f"unknown command {cmd}\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
