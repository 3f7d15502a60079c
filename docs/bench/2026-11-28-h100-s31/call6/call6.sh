#!/usr/bin/env bash
# Session 31 call 6. Binary 81de5f9 (TESSERA_FIRST_LOADS=N: the first N tile loads). 0.6B,
# positions 1 and 512, 6 reps: head / f1 (the first tile only, beside the window prefetch)
# / f1nw (the first tile only, every stage's window prefetch off) / f1nwm (the first tile
# only, the MLP's window prefetch off).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1 p512"
timeout 500 bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head f1 f1nw f1nwm
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
