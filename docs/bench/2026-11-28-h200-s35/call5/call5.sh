#!/usr/bin/env bash
# Session 35 call 5 (H200). Binary: main c18fc5e as it lands (frag_rows and fast_exp2 on,
# prefill's attention 64 x 64 on 4 warps, 3 stages).
#  1. the attention example (B4 H32 S4096 D128, not causal and causal) twice, torch SDPA
#     beside it, the attention GPU test;
#  2. scripts/device_prefill.sh committed 0.6b: the GPU prefill tests, the real-shape prefill
#     test, transformers' prefill beside `tessera bench` at 128 / 512 / 2048 / 8192 tokens;
#  3. the GPU decode tests with the 0.6B real-shape checkpoint (decode's kernels gained only
#     the prelude's unused `tsr_ex2`);
#  4. issue 10: session 34's reuse barriers elided, at 4B (not measured there): decode A/B
#     head / rs0 (TESSERA_REUSE_SYNC=0), positions 1 and 512, 4 repetitions.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
left() { echo $(( 580 - ($(date +%s) - T0) )); }
echo "=== [$(date +%T)] attention example, TFLOP/s"
for rep in 1 2; do for c in "" --causal; do
  printf "%s rep%s: " "${c:-full}" $rep
  timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"ms": [0-9.]+, "tflops": [0-9.]+, "tune_s": [0-9.]+' | tail -1
done; done
for c in "" --causal; do timeout 90 python3 scripts/dot_peers.py attention 4 32 4096 128 $c 2>&1 | grep -oE '"kernel": "[^"]+", .*"causal": [a-z]+, "ms": [0-9.]+, "tflops": [0-9.]{5}' ; done
timeout 60 .gpu/bin/test-dot_kernels --ignored --exact attention_on_gpu_matches_f64_within_tolerance > $ROOT/tests-dot.log 2>&1; echo "dot rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-dot.log | tail -3
echo "=== [$(date +%T)] device_prefill.sh committed 0.6b"
OUT=$ROOT/prefill timeout 240 bash scripts/device_prefill.sh committed 0.6b > $ROOT/prefill-stdout.txt 2>&1; echo "prefill rc=$?"
grep -E "rc=|^\| *(1|128|512|2048|8192) |logits after prefill|test result|FAILED" $ROOT/prefill-stdout.txt | tail -16
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU decode tests ($(left) s left)"
timeout 150 env TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-decode.log 2>&1; echo "decode rc=$?"
grep -E "test result|FAILED|panicked|first-logit" $ROOT/tests-decode.log | tail -6
echo "=== [$(date +%T)] 4B decode A/B head / rs0 ($(left) s left)"
ensure_ckpt 4b "$ROOT/hf-4b.log"
timeout $(( $(left) - 15 )) bash scripts/device_ab_reps.sh 4b 4 "1 512" head rs0
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected*.json' --exclude=stdout.txt --exclude=env.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
