#!/usr/bin/env bash
# Session 35 call 4 (H200). Binary: main c855802 (frag_rows on, prefill's attention 64 x 64 on 4
# warps, 3 stages) + `EmitOptions::fast_exp2` (off by default; `fe` = TESSERA_FAST_EXP2=1: an
# f32 exp2 as one `ex2.approx.ftz` instead of exp2f's range check and two multiplies; only
# FlashAttention calls exp2).
#  1. the attention example's TFLOP/s (B4 H32 S4096 D128, not causal and causal), head / fe
#     ABAB twice;
#  2. time to first token at 512 / 2048 / 8192 prompt tokens at 0.6B: head / fe ABAB twice, and
#     fe with prefill's attention at 128,32,4,3 (two m16 tiles a warp, 253 registers) and
#     128,128,8,2;
#  3. with fe: the attention GPU test (f64 reference), the GPU prefill tests;
#  4. issue 10, not measured before: compute-sanitizer memcheck on the decode megakernel at
#     Qwen3-0.6B's real shape (random weights), two steps at position 0.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
left() { echo $(( 570 - ($(date +%s) - T0) )); }
echo "=== [$(date +%T)] attention example, TFLOP/s"
for rep in 1 2; do for arm in head fe; do for c in "" --causal; do
  e="TESSERA_CACHE_DIR=/tmp/tc-$arm"; [[ $arm == fe ]] && e="$e TESSERA_FAST_EXP2=1"
  printf "%s %s rep%s: " $arm "${c:-full}" $rep
  env $e timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"ms": [0-9.]+, "tflops": [0-9.]+, "tune_s": [0-9.]+' | tail -1
done; done; done
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] prefill TTFT 512 / 2048 / 8192"
for rep in 1 2; do for arm in head fe fe128x32x4x3 fe128x128x8x2; do
  case $arm in
    head) e="X=0" ;; fe) e="TESSERA_FAST_EXP2=1" ;;
    *) e="TESSERA_FAST_EXP2=1 TESSERA_PREFILL_ATTN=$(echo ${arm#fe} | tr x ,)" ;;
  esac
  env $e timeout 120 .gpu/bin/tessera bench --model $d --positions 1 --tokens 8 --no-kernels --prompts 512,2048,8192 --prefill-repeats 5 > $ROOT/prefill-$arm-$rep.md 2>&1
  echo "--- $arm rep$rep"; grep -iE "^\| *(512|2048|8192) " $ROOT/prefill-$arm-$rep.md | cut -d'|' -f2-3
done; done
echo "=== [$(date +%T)] GPU tests with TESSERA_FAST_EXP2=1 ($(left) s left)"
TESSERA_FAST_EXP2=1 timeout 60 .gpu/bin/test-dot_kernels --ignored --exact attention_on_gpu_matches_f64_within_tolerance > $ROOT/tests-dot.log 2>&1; echo "dot rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-dot.log | tail -3
TESSERA_FAST_EXP2=1 timeout 120 .gpu/bin/test-gpu_prefill --ignored --test-threads=1 > $ROOT/tests-prefill.log 2>&1; echo "prefill rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-prefill.log | tail -3
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] memcheck, decode megakernel at 0.6B's shape, position 0 ($(left) s left)"
timeout $(( $(left) - 20 )) "$cs" --tool memcheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/memcheck-0.6b.log 2>&1; echo rc=$?
grep -E "ERROR SUMMARY|^\| [0-9]" $ROOT/memcheck-0.6b.log | head -3
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt --exclude=env.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
