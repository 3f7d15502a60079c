#!/usr/bin/env bash
# Session 34 call 9 (H200). Binaries: main d4b8560's tessera and attention example. The
# reuse barriers elided by default change the decode step and FlashAttention: racecheck and
# memcheck on them.
#  1. racecheck, the decode megakernel on the committed GQA-4 test model at positions 0 (the
#     attention inside o_proj) and 256 (the split attention, its key-tile loops);
#  2. memcheck at position 0 on the same model;
#  3. racecheck on the attention example (FlashAttention on the cp.async ring, causal).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
m=model/tests/data/untied_gqa4_v5
for p in 0 256; do
  echo "=== [$(date +%T)] racecheck at position $p ($m)"
  timeout 60 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model $m --tokens 2 --position $p --watchdog-ms 120000 > $ROOT/racecheck-p$p.log 2>&1; echo rc=$?
  grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/racecheck-p$p.log | head -3
done
echo "=== [$(date +%T)] memcheck at position 0 ($m)"
timeout 60 "$cs" --tool memcheck --error-exitcode 9 .gpu/bin/tessera tune --model $m --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/memcheck-p0.log 2>&1; echo rc=$?
grep -E "ERROR SUMMARY|^\| [0-9]" $ROOT/memcheck-p0.log | head -3
echo "=== [$(date +%T)] racecheck on the attention example (B1 H2 S256 D128, causal)"
timeout 150 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/attention --bench 1 2 256 128 --causal > $ROOT/racecheck-attention.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|tflops" $ROOT/racecheck-attention.log | head -3
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
