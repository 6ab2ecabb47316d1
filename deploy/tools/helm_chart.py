"""Helm's own engine for deploy/check.sh, without a helm binary.

helm-python-sdk (deploy/requirements.txt) ships libhelm_c, Helm v4's Go SDK
built as a shared library, so this runs Helm's code itself: its template
engine, values handling, install-order sorting and linter.

    helm_chart.py render CHART [-f VALUES]... [--name NAME] [--namespace NS]
        print what `helm template NAME CHART --namespace NS -f VALUES...` prints
    helm_chart.py lint CHART [-f VALUES]... [--namespace NS]
        `helm lint --strict`: exit 1 on any error or warning
    helm_chart.py version
        the libhelm_c and Helm versions in use

A failure exits 1 with Helm's message on stderr.
"""

import argparse
import sys

import yaml

import helm_python as helm

SEVERITY = ["UNKNOWN", "INFO", "WARNING", "ERROR"]  # Helm's lint/support names


def merge_maps(a, b):
    """Helm's values.Options mergeMaps: later -f files win, maps merge key by key."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_maps(out[k], v)
        else:
            out[k] = v
    return out


def read_values(paths):
    vals = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            # Helm's own YAML reading (numbers, nulls and all), not PyYAML's.
            vals = merge_maps(vals, helm.values_from_yaml(f.read()))
    return vals


def hook_templates(chart, vals, name, namespace):
    """Templates that render a Helm hook: the release summary libhelm_c
    returns carries no hooks, so `render` could not print them."""
    found = []
    with helm.Chart.load(chart) as c:
        rendered = c.render(vals, name=name, namespace=namespace, is_install=True)
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            annotations = ((doc or {}).get("metadata") or {}).get("annotations") or {}
            if "helm.sh/hook" in annotations:
                found.append(path)
    return found


def cmd_render(args):
    vals = read_values(args.values)
    # `helm template` is an install in client-side dry-run mode: no cluster is
    # contacted, and memory storage keeps the release name check offline.
    with helm.Config(namespace=args.namespace, storage_driver="memory") as cfg:
        rel = cfg.install(args.chart, args.name, vals, namespace=args.namespace, dry_run="client")
    hooks = hook_templates(args.chart, vals, args.name, args.namespace)
    if hooks:
        print(
            f"helm_chart.py render: Helm hooks in {', '.join(hooks)}: this tool cannot "
            "print hooks (libhelm_c's release summary leaves them out)",
            file=sys.stderr,
        )
        return 1
    # As `helm template` prints it (pkg/cmd/template.go): the manifest, trimmed.
    sys.stdout.write(rel["manifest"].strip() + "\n")
    return 0


def cmd_lint(args):
    vals = read_values(args.values)
    report = helm.lint(args.chart, vals, strict=True, namespace=args.namespace)
    # Output and verdict as `helm lint --strict` has them (pkg/cmd/lint.go):
    # in strict mode every warning is also listed in "errors".
    print(f"==> Linting {args.chart}")
    if not report["messages"]:
        for err in report["errors"]:
            print(f"Error {err}")
    for msg in report["messages"]:
        print(f"[{SEVERITY[msg['severity']]}] {msg['path']}: {msg['error']}")
    failed = 1 if report["errors"] else 0
    print(f"\n1 chart(s) linted, {failed} chart(s) failed")
    return failed


def main(argv):
    parser = argparse.ArgumentParser(prog="helm_chart.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("render", "lint"):
        p = sub.add_parser(name)
        p.add_argument("chart")
        p.add_argument("-f", "--values", action="append", default=[], metavar="VALUES")
        p.add_argument("--namespace", default="default")
        if name == "render":
            p.add_argument("--name", default="release-name")
    sub.add_parser("version")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "render":
            return cmd_render(args)
        if args.cmd == "lint":
            return cmd_lint(args)
        print(f"helm-python-sdk {helm.__version__}, libhelm_c {helm.helm_c_version()}, Helm {helm.helm_sdk_version()}")
        return 0
    except (helm.HelmError, OSError) as e:
        print(f"helm_chart.py {args.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
