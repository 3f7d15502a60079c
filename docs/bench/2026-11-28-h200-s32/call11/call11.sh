#!/usr/bin/env bash
# Session 32 call 11. Binary: .gpu/bin/tessera = this session's tree (MegaOptions::publish_first
# added, off: the default's generated C identical to main 66cb6f5's); tessera-pf = the same with
# TESSERA_PUBLISH_FIRST=1 (a __syncthreads after each stage's publish, so the CTA's next
# window prefetches leave after thread 0's release). 0.6B A/B at positions 1 and 512, 6 reps;
# the GPU decode tests with it on; 1.7B position 1, 4 reps, if time is left.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1 p512"
timeout 300 bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head pf
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU tests with TESSERA_PUBLISH_FIRST=1"
timeout 150 env TESSERA_PUBLISH_FIRST=1 TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
if (( $(date +%s) - T0 < 380 )); then
  echo "=== [$(date +%T)] 1.7b A/B p1"
  timeout $(( 560 - ($(date +%s) - T0) )) bash scripts/device_ab_reps.sh 1.7b 4 "1" head pf
fi
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
