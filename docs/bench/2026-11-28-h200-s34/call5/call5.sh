#!/usr/bin/env bash
# Session 34 call 5 (H200): main 912f202 as it lands (the reuse barriers elided, prefill's
# attention in 128 x 64 blocks). `scripts/device_prefill.sh committed 0.6b` (the GPU prefill
# tests, the real-shape prefill test, transformers' prefill at 128-8192 tokens, `tessera bench`
# beside it); the GPU decode tests (the real-shape test too); the attention example beside
# torch SDPA (flash, cuDNN).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
OUT=$ROOT bash scripts/device_prefill.sh committed 0.6b > $ROOT/prefill-stdout.txt 2>&1
grep -E "^\| *[0-9]+ |rc=|failed|first-logit|greedy|relative" $ROOT/prefill-stdout.txt | tail -30
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU decode tests"
timeout 200 env TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-decode.log 2>&1; echo "decode rc=$?"
grep -E "test result|FAILED|panicked|first-logit" $ROOT/tests-decode.log | tail -4
echo "=== [$(date +%T)] attention example and torch SDPA, B4 H32 S4096 D128"
for c in "" --causal; do
  timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"causal": [a-z]+, "ms": [0-9.]+, "tflops": [0-9.]+'
  timeout 90 python3 scripts/dot_peers.py attention 4 32 4096 128 $c 2>&1 | tail -3
done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name 'bench-*.md' ! -name 'tests-*.log' ! -name prefill.log -exec rm -rf {} +
