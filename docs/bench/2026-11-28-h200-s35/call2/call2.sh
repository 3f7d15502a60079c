#!/usr/bin/env bash
# Session 35 call 2 (H200). The same binary as call 1 (c8e4a67 + `EmitOptions::frag_rows`,
# off; `fr` = TESSERA_FRAG_ROWS=1). Call 1's attention-example A/B ran beside the checkpoint's
# writer on the same GPU; here nothing runs beside it.
#  1. the attention example's TFLOP/s (B4 H32 S4096 D128, causal and not), head / fr ABAB twice,
#     then torch SDPA (scripts/dot_peers.py);
#  2. (checkpoint written after 1) time to first token at 512 / 2048 / 8192 prompt tokens at
#     0.6B with fr and prefill's attention at 128,64,8,2 (shipped), 128,128,8,2, 128,128,8,3,
#     64,64,4,2, 64,64,4,3; head once; two repetitions.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] attention example, TFLOP/s"
for rep in 1 2; do for arm in head fr; do for c in "" --causal; do
  e="TESSERA_CACHE_DIR=/tmp/tc-$arm"; [[ $arm == fr ]] && e="$e TESSERA_FRAG_ROWS=1"
  printf "%s %s rep%s: " $arm "${c:-full}" $rep
  env $e timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"ms": [0-9.]+, "tflops": [0-9.]+, "tune_s": [0-9.]+' | tail -1
done; done; done
echo "=== [$(date +%T)] torch SDPA"
for c in "" --causal; do timeout 90 python3 scripts/dot_peers.py attention 4 32 4096 128 $c 2>&1 | grep -oE '"kernel": "[^"]+", .*"causal": [a-z]+, "ms": [0-9.]+, "tflops": [0-9.]{5}' ; done
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] prefill TTFT 512 / 2048 / 8192"
for rep in 1 2; do for arm in head t128x64x8x2 t128x128x8x2 t128x128x8x3 t64x64x4x2 t64x64x4x3; do
  [[ $arm == head && $rep == 2 ]] && continue
  e="X=0"; [[ $arm != head ]] && e="TESSERA_FRAG_ROWS=1 TESSERA_PREFILL_ATTN=$(echo ${arm#t} | tr x ,)"
  env $e timeout 120 .gpu/bin/tessera bench --model $d --positions 1 --tokens 8 --no-kernels --prompts 512,2048,8192 --prefill-repeats 5 > $ROOT/prefill-$arm-$rep.md 2>&1
  echo "--- $arm rep$rep"; grep -iE "^\| *(512|2048|8192) " $ROOT/prefill-$arm-$rep.md | cut -d'|' -f2-3
done; done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt --exclude=env.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
