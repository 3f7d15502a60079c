#!/usr/bin/env bash
# Session 29 call 5. Binary: .gpu/bin/tessera = b557de1 (QKV pairs the default below
# position 128 at 0.6B; the split form a candidate, off). Arms at 0.6B position 512 (the
# plain step): head, sp (TESSERA_QKV_PAIRS_SPLIT=1: attn_split_scaled, the rule's waits;
# ptxas spills 52 / 184 bytes), spd (sp with no stage waiting in its body: 8 / 64 bytes),
# 6 reps; the GPU tests with sp on (real shape at 0.6B); racecheck at position 256 on the
# small test model with sp on.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
timeout 230 bash scripts/device_ab_reps.sh 0.6b 6 "512" head sp spd
d=$(ckpt_dir 0.6b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] racecheck at position 256 (tied_gqa2_v4), sp"
timeout 60 env TESSERA_QKV_PAIRS_SPLIT=1 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model model/tests/data/tied_gqa2_v4 --tokens 2 --position 256 --watchdog-ms 120000 > $ROOT/sanitize-racecheck-sp-p256.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-racecheck-sp-p256.log | head -3
left=$(( 470 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] GPU tests with sp (real shape at 0.6B; limit ${left}s)"
timeout $left env TESSERA_QKV_PAIRS_SPLIT=1 TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
