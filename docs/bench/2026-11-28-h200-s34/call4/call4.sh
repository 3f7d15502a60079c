#!/usr/bin/env bash
# Session 34 call 4 (H200). Binary: f6f53d2 (reuse barriers elided by default) + the
# experiment knob TESSERA_PREFILL_ATTN=BM,BN,WARPS,STAGES (prefill's FlashAttention tiles;
# head: 64,64,8,3). Arms: a1 128,64,8,2 (the attention example's first config; 249 registers,
# no spill), a2 128,32,8,3 (214), a3 128,64,8,3. Time to first token at 2048 and 8192 prompt
# tokens at 0.6B (tessera bench, 5 prefills a length), ABAB twice; then the GPU prefill tests
# with each arm's tiles.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null || echo "no nsys"
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] prefill TTFT 2048 / 8192"
for rep in 1 2; do for arm in head a1 a2 a3; do
  b=.gpu/bin/tessera; [[ $arm != head ]] && b=.gpu/bin/tessera-$arm
  timeout 120 $b bench --model $d --positions 1 --tokens 8 --no-kernels --prompts 2048,8192 --prefill-repeats 5 > $ROOT/prefill-$arm-$rep.md 2>&1
  echo "--- $arm rep$rep"; grep -iE "^\| *(2048|8192) " $ROOT/prefill-$arm-$rep.md
done; done
echo "=== [$(date +%T)] GPU prefill tests with each arm's tiles"
for t in 128,64,8,2 128,32,8,3 128,64,8,3; do
  TESSERA_PREFILL_ATTN=$t timeout 100 .gpu/bin/test-gpu_prefill --ignored --test-threads=1 > $ROOT/tests-prefill-$t.log 2>&1; echo "$t rc=$?"
  grep -E "test result|FAILED|panicked" $ROOT/tests-prefill-$t.log | tail -3
done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name 'tests-*.log' ! -name 'prefill-*.md' -exec rm -rf {} +
