#!/usr/bin/env bash
# Session 34 call 6 (H200). Binary: 912f202 + `MegaOptions::snapshot_scalars` (off: head's
# generated C is 912f202's); snap = TESSERA_SNAPSHOT=1: the decode step reads `pos`, `token`,
# `seed` and `inv_temp` once when it starts, and the stages before the last (which writes
# them) read the copies, so no stage loads the position after its wait.
#  1. decode A/B at 0.6B, positions 1 / 512 / 2048, 4 reps; 1.7B at 1 / 512, 4 reps;
#  2. the GPU decode tests with snap (the real-shape test too).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b decode A/B p1 p512 p2048"
timeout 240 bash scripts/device_ab_reps.sh 0.6b 4 "1 512 2048" head snap
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU decode tests with TESSERA_SNAPSHOT=1"
timeout 150 env TESSERA_SNAPSHOT=1 TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-decode.log 2>&1; echo "decode rc=$?"
grep -E "test result|FAILED|panicked|first-logit" $ROOT/tests-decode.log | tail -4
echo "=== [$(date +%T)] 1.7b decode A/B p1 p512"
timeout 200 bash scripts/device_ab_reps.sh 1.7b 4 "1 512" head snap
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name 'tests-*.log' -exec rm -rf {} +
