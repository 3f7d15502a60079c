#!/usr/bin/env bash
# The light pack for scripts/device_dot_ab.sh: only the matmul and attention examples
# (release, stripped) and device-env.sh into .gpu/ (scripts/pack_gpu.sh builds the whole
# workspace, tests included). Two builds, one from each commit:
#   git checkout A; bash scripts/pack_dot_ab.sh      # .gpu/bin/{matmul,attention}, commit
#   git checkout B; bash scripts/pack_dot_ab.sh B    # adds .gpu/bin/{matmul,attention}-B,
#                                                    # commit-B (A's files stay)
# then one device call with carry [".gpu"]: bash scripts/device_dot_ab.sh
# A candidate behind an option needs one pack only: without the -B binaries,
# device_dot_ab.sh runs B as A's binaries with $B_ENV (NAME=VALUE, required then).
set -euo pipefail
cd "$(dirname "$0")/.."
side=${1:-A}
case $side in
  A) rm -rf .gpu; mkdir -p .gpu/bin; cp scripts/device-env.sh .gpu/; pwd > .gpu/origin; suffix= ;;
  B) [[ -x .gpu/bin/matmul ]] || { echo "pack A first (no .gpu/bin/matmul)" >&2; exit 1; }; suffix=-B ;;
  *) echo "usage: $0 [A|B]" >&2; exit 2 ;;
esac
cargo build --release --example matmul --example attention
dir=${CARGO_TARGET_DIR:-target}/release/examples
for e in matmul attention; do
  cp "$dir/$e" ".gpu/bin/$e$suffix"
  strip ".gpu/bin/$e$suffix" 2>/dev/null || true
done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > ".gpu/commit$suffix"
ls .gpu/bin | tr '\n' ' '; echo; du -sh .gpu
