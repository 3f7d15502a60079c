#!/usr/bin/env bash
# Session 31 call 4. Binary: .gpu/bin/tessera = ab7c4db; tessera-fl = the same with
# TESSERA_FIRST_LOADS=1 (MegaOptions::prefetch_first_loads: each CTA puts its first
# program's first weight tiles into L2 before it waits, after a bar.sync behind the
# publish). 0.6B A/B at positions 1 and 512, 6 reps each; the GPU decode tests with it on;
# 1.7B at position 1, 4 reps, if time is left.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1 p512"
timeout 300 bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head fl
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU tests with TESSERA_FIRST_LOADS=1"
timeout 150 env TESSERA_FIRST_LOADS=1 TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
if (( $(date +%s) - T0 < 380 )); then
  echo "=== [$(date +%T)] 1.7b A/B p1"
  timeout $(( 560 - ($(date +%s) - T0) )) bash scripts/device_ab_reps.sh 1.7b 4 "1" head fl
fi
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
