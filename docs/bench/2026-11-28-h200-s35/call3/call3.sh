#!/usr/bin/env bash
# Session 35 call 3 (H200). Binary: main 83b48c7 as it lands (`EmitOptions::frag_rows` on,
# prefill's attention in 64 x 64 blocks on 4 warps, 3 stages).
#  1. the attention example's TFLOP/s (B4 H32 S4096 D128, not causal and causal) twice, then
#     torch SDPA beside it (scripts/dot_peers.py), and the attention GPU test (f64 reference);
#  2. scripts/device_prefill.sh committed 0.6b 4b: the committed GPU prefill tests, the
#     real-shape prefill test, transformers' prefill beside `tessera bench` at 128 / 512 /
#     2048 / 8192 prompt tokens, at 0.6B and 4B.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] attention example, TFLOP/s"
for rep in 1 2; do for c in "" --causal; do
  printf "%s rep%s: " "${c:-full}" $rep
  timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"ms": [0-9.]+, "tflops": [0-9.]+, "tune_s": [0-9.]+' | tail -1
done; done
for c in "" --causal; do timeout 90 python3 scripts/dot_peers.py attention 4 32 4096 128 $c 2>&1 | grep -oE '"kernel": "[^"]+", .*"causal": [a-z]+, "ms": [0-9.]+, "tflops": [0-9.]{5}' ; done
timeout 60 .gpu/bin/test-dot_kernels --ignored --exact attention_on_gpu_matches_f64_within_tolerance > $ROOT/tests-dot.log 2>&1; echo "dot rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-dot.log | tail -3
echo "=== [$(date +%T)] device_prefill.sh committed 0.6b 4b"
OUT=$ROOT/prefill timeout 480 bash scripts/device_prefill.sh committed 0.6b 4b > $ROOT/prefill-stdout.txt 2>&1; echo "prefill rc=$?"
grep -E "^=== |rc=|^\| *(128|512|2048|8192) |relative|greedy|test result|FAILED" $ROOT/prefill-stdout.txt | tail -60
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude=stdout.txt --exclude=env.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
