#!/usr/bin/env bash
# Session 26 call 9 (11c3bda, the session's default: the MLP's wait prefetch 2 MiB up to
# hidden 2560, 4 at 8B): the MLP's 2 and 1 MiB at 8B (wm2, wm1) against 4 (head), at
# positions 1 and 512, 4 reps.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 8b A/B"
bash scripts/device_ab_reps.sh 8b 4 "1 512" head wm2 wm1
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
