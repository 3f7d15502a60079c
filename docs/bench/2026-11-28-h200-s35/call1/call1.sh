#!/usr/bin/env bash
# Session 35 call 1 (H200). Binary: c8e4a67 + `EmitOptions::frag_rows` (off: head's generated C
# is main's); `fr` = the same with TESSERA_FRAG_ROWS=1 (FlashAttention's softmax in the
# fragment's registers: chained dots on warps over M, row max / sum by quad shuffles, m and
# alpha broadcast from registers, P into the second dot from registers; the key loop's
# barriers 9 -> 2 in the attention example's 128x64 tile).
#  1. the attention example's TFLOP/s (B4 H32 S4096 D128, causal and not), ABAB twice, and
#     torch SDPA on the same shapes (scripts/dot_peers.py);
#  2. time to first token at 2048 and 8192 prompt tokens at 0.6B (tessera bench, 5 prefills
#     each): head, fr at the shipped tiles (128,64,8,2), fr with 128,128,8,2 and 64,64,4,2;
#     ABAB twice;
#  3. with fr: the attention GPU test (f64 reference), the GPU prefill tests;
#  4. with fr: racecheck on the attention example (causal and not) and on a 300-token prefill.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
left() { echo $(( 570 - ($(date +%s) - T0) )); }
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log" &
ck=$!
echo "=== [$(date +%T)] attention example, TFLOP/s"
for rep in 1 2; do for arm in head fr; do for c in "" --causal; do
  e="TESSERA_CACHE_DIR=/tmp/tc-$arm"; [[ $arm == fr ]] && e="$e TESSERA_FRAG_ROWS=1"
  printf "%s %s rep%s: " $arm "${c:-full}" $rep
  env $e timeout 60 .gpu/bin/attention --bench 4 32 4096 128 $c 2>&1 | grep -oE '"ms": [0-9.]+, "tflops": [0-9.]+, "tune_s": [0-9.]+, "sampled_rel_err": [0-9.e+-]+' | tail -1
done; done; done
echo "=== [$(date +%T)] torch SDPA"
for c in "" --causal; do timeout 90 python3 scripts/dot_peers.py attention 4 32 4096 128 $c 2>&1 | grep -E '^\{' ; done
wait $ck
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] prefill TTFT 2048 / 8192"
for rep in 1 2; do for arm in head fr fr128 fr64; do
  case $arm in
    head) e="X=0" ;; fr) e="TESSERA_FRAG_ROWS=1" ;;
    fr128) e="TESSERA_FRAG_ROWS=1 TESSERA_PREFILL_ATTN=128,128,8,2" ;;
    fr64) e="TESSERA_FRAG_ROWS=1 TESSERA_PREFILL_ATTN=64,64,4,2" ;;
  esac
  env $e timeout 120 .gpu/bin/tessera bench --model $d --positions 1 --tokens 8 --no-kernels --prompts 2048,8192 --prefill-repeats 5 > $ROOT/prefill-$arm-$rep.md 2>&1
  echo "--- $arm rep$rep"; grep -iE "^\| *(2048|8192) " $ROOT/prefill-$arm-$rep.md
done; done
echo "=== [$(date +%T)] GPU tests with TESSERA_FRAG_ROWS=1 ($(left) s left)"
export TESSERA_FRAG_ROWS=1
timeout 60 .gpu/bin/test-dot_kernels --ignored --exact attention_on_gpu_matches_f64_within_tolerance --nocapture > $ROOT/tests-dot.log 2>&1; echo "dot rc=$?"
grep -E "test result|FAILED|panicked|error" $ROOT/tests-dot.log | tail -6
timeout 120 .gpu/bin/test-gpu_prefill --ignored --test-threads=1 > $ROOT/tests-prefill.log 2>&1; echo "prefill rc=$?"
grep -E "test result|FAILED|panicked" $ROOT/tests-prefill.log | tail -4
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for c in --causal ""; do
  echo "=== [$(date +%T)] racecheck, attention example ${c:-full} (B1 H2 S256 D128) ($(left) s left)"
  timeout 120 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/attention --bench 1 2 256 128 $c > $ROOT/racecheck-attention$c.log 2>&1; echo rc=$?
  grep -E "RACECHECK SUMMARY|tflops" $ROOT/racecheck-attention$c.log | head -3
done
m=model/tests/data/untied_gqa4_v5
echo "=== [$(date +%T)] racecheck, 300-token prefill ($m) ($(left) s left)"
ids=$(grep -oE -- '--prompt-ids [0-9,]+' docs/bench/2026-11-28-h200-s34/call10/call10.sh | cut -d' ' -f2)
timeout $(( $(left) - 15 )) "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera generate --model $m --prompt-ids $ids --max-new-tokens 2 > $ROOT/racecheck-prefill.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|error" $ROOT/racecheck-prefill.log | head -3
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name 'tests-*.log' ! -name 'prefill-*.md' -exec rm -rf {} +
