#!/usr/bin/env bash
# The light pack for scripts/device_dot_ab.sh: only the matmul and attention examples
# (release, stripped) and device-env.sh into .gpu/ (scripts/pack_gpu.sh builds the whole
# workspace). B is the same binaries with TESSERA_DOT set, unless .gpu/bin/*-B are copied
# in afterwards from another build.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu
mkdir -p .gpu/bin
cp scripts/device-env.sh .gpu/
pwd > .gpu/origin
cargo build --release --example matmul --example attention
dir=${CARGO_TARGET_DIR:-target}/release/examples
cp "$dir/matmul" "$dir/attention" .gpu/bin/
strip .gpu/bin/* 2>/dev/null || true
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo -dirty)" > .gpu/commit
ls .gpu/bin | tr '\n' ' '; echo; du -sh .gpu
