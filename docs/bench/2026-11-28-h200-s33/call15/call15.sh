#!/usr/bin/env bash
# Session 33 call 15 (H200). Binary: branch s33-scatter-reduce (07ab9ee) with `EmitOptions::scatter_reductions`
# (off: the default generated C is main's); tessera-sc = the same with TESSERA_SCATTER_REDUCE=1
# (row reductions of several rows a thread in a transposed butterfly: the attention inside
# o_proj 1152 -> 979 SASS instructions, the step 6368 -> 6096). 0.6B A/B at positions 1 and
# 512, 4 reps; then the GPU decode tests with it on.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1 p512"
timeout 300 bash scripts/device_ab_reps.sh 0.6b 4 "1 512" head sc
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU tests with TESSERA_SCATTER_REDUCE=1"
timeout $(( 420 - ($(date +%s) - T0) )) env TESSERA_SCATTER_REDUCE=1 TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
