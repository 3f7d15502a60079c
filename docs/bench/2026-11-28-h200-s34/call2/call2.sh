#!/usr/bin/env bash
# Session 34 call 2 (H200). Binary: main + `EmitOptions::elide_reuse_syncs` (off: head's
# generated C is main's); `rs` = the same with TESSERA_REUSE_SYNC=1 (a loop's shared-memory
# region rewritten with no barrier of its own when a barrier of the same iteration came
# before it: prefill's FlashAttention 15 -> 9 barriers, 6 a key block; the decode step 42 -> 38).
#  1. decode A/B, 0.6B, positions 1 / 512 / 2048, 4 reps (device_ab_reps.sh);
#  2. the attention example's TFLOP/s (B4 H32 S4096 D128, causal and not), ABAB;
#  3. time to first token at 2048 and 8192 prompt tokens (tessera bench, 5 prefills each), ABAB;
#  4. with rs: the GPU tests of dot_kernels, gpu_prefill (committed checkpoints) and
#     gpu_decode (the real-shape 0.6B test too).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
left() { echo $(( 560 - ($(date +%s) - T0) )); }
echo "=== [$(date +%T)] 0.6b decode A/B p1 p512 p2048"
timeout 240 bash scripts/device_ab_reps.sh 0.6b 4 "1 512 2048" head rs
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] attention example, TFLOP/s"
for rep in 1 2; do for arm in head rs; do for c in "" --causal; do
  e="TESSERA_CACHE_DIR=/tmp/tc-$arm"; [[ $arm == rs ]] && e="$e TESSERA_REUSE_SYNC=1"
  printf "%s %s rep%s: " $arm "${c:-full}" $rep
  env $e timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"ms": [0-9.]+, "tflops": [0-9.]+' | tail -1
done; done; done
echo "=== [$(date +%T)] prefill TTFT 2048 / 8192"
for rep in 1 2; do for arm in head rs; do
  e=""; [[ $arm == rs ]] && e="TESSERA_REUSE_SYNC=1"
  env $e timeout 120 .gpu/bin/tessera bench --model $d --positions 1 --tokens 8 --no-kernels --prompts 2048,8192 --prefill-repeats 5 > $ROOT/prefill-$arm-$rep.md 2>&1
  echo "--- $arm rep$rep"; grep -iE "^\| *(2048|8192) " $ROOT/prefill-$arm-$rep.md
done; done
echo "=== [$(date +%T)] GPU tests with TESSERA_REUSE_SYNC=1 ($(left) s left)"
export TESSERA_REUSE_SYNC=1
timeout 100 .gpu/bin/test-dot_kernels --ignored --test-threads=1 > $ROOT/tests-dot.log 2>&1; echo "dot rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-dot.log | tail -4
timeout 120 .gpu/bin/test-gpu_prefill --ignored --test-threads=1 > $ROOT/tests-prefill.log 2>&1; echo "prefill rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-prefill.log | tail -4
timeout $(left) env TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-decode.log 2>&1; echo "decode rc=$?"
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests-decode.log | tail -14
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name 'tests-*.log' ! -name 'prefill-*.md' -exec rm -rf {} +
