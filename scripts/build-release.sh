#!/usr/bin/env bash
# The gateway's production build: the release profile (one codegen unit, fat
# LTO) plus profile-guided optimisation. An instrumented build serves a
# training run of tool calls (scripts/pgo-train.py), and the final build is
# optimised with the profile it wrote: about a fifth fewer instructions per
# call than `cargo build --release` alone (benches/README.md).
#
# Takes two release builds, about ten minutes on 2 cores. Installs cmake and
# rustup's llvm-tools (llvm-profdata) when missing. The binary ends up in
# target/pgo/otc-gateway (the path is printed last). The deploy image
# (deploy/Dockerfile) and the benchmarks (benches/run.sh) are built this way.
source "$(dirname "$0")/lib.sh"
need_build_tools
command -v python3 >/dev/null 2>&1 || apt_install python3
cd "$ROOT"

host=$(rustc -vV | sed -n 's/^host: //p')
# llvm-profdata must match rustc's LLVM: rustup's llvm-tools has the one that
# does. LLVM_PROFDATA names another.
profdata="${LLVM_PROFDATA:-$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata}"
if [ ! -x "$profdata" ]; then
  if ! command -v rustup >/dev/null 2>&1; then
    echo "build-release.sh: no llvm-profdata at $profdata and no rustup to install llvm-tools;" \
      "set LLVM_PROFDATA to one matching rustc's LLVM, or build with cargo build --release" >&2
    exit 1
  fi
  rustup component add llvm-tools
fi

work="$ROOT/target/pgo"
rm -rf "$work/profiles" "$work/merged.profdata"
mkdir -p "$work/profiles"
# An explicit --target keeps RUSTFLAGS off build scripts and proc macros:
# only the gateway's own code is instrumented and optimised. Separate target
# directories keep both builds' dependencies for the next run.
build() {
  local dir="$1" flag="$2"
  RUSTFLAGS="${RUSTFLAGS:-} $flag" CARGO_TARGET_DIR="$work/$dir" \
    cargo build --release --locked --bin otc-gateway --target "$host"
}

echo "== 1/3 instrumented build" >&2
build instrumented "-Cprofile-generate=$work/profiles"
echo "== 2/3 training run" >&2
python3 scripts/pgo-train.py "$work/instrumented/$host/release/otc-gateway"
"$profdata" merge -o "$work/merged.profdata" "$work/profiles"
echo "== 3/3 optimised build" >&2
build optimised "-Cprofile-use=$work/merged.profdata"
cp "$work/optimised/$host/release/otc-gateway" "$work/otc-gateway"
echo "$work/otc-gateway"
