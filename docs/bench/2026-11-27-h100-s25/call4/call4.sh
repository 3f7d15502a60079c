#!/usr/bin/env bash
# Session 25 call 4 (binary in .gpu/commit): the candidate kvp (TESSERA_KV_PREFETCH=1: the
# attention inside o_proj prefetches its first tile's cached K/V rows into L2 before its
# wait) against the default at 0.6B position 1 (128 tokens: contexts 1 to 128, the
# specialisation's whole range), 6 reps; the GPU tests of the attention inside o_proj with it; then memcheck on the
# default step at position 256 (the split attention, warp reductions) and racecheck there
# with what time is left.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] tests with kvp"
timeout 120 env -u TESSERA_HF_CKPT TESSERA_KV_PREFETCH=1 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture gpu_attention_inside gpu_megakernel_equals gpu_megakernel_greedy > $ROOT/tests-kvp.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests-kvp.log | tail -6
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1" head kvp
d=$(ckpt_dir 0.6b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] memcheck at position 256"
timeout 150 "$cs" --tool memcheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 256 --watchdog-ms 120000 > $ROOT/sanitize-memcheck-p256.log 2>&1; echo rc=$?
grep -E "ERROR SUMMARY|^\| [0-9]" $ROOT/sanitize-memcheck-p256.log | head -3
left=$(( 585 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] racecheck at position 256 (limit ${left}s)"
timeout $left "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 256 --watchdog-ms 600000 > $ROOT/sanitize-racecheck-p256.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-racecheck-p256.log | head -3
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
