#!/usr/bin/env bash
# Session 29 call 9. Binary: 93eb9a7 (main's default). compute-sanitizer memcheck at 0.6B
# position 256 (the plain step: the QKV pairs and attn_split_scaled), racecheck at 256 on
# the small test model untied_gqa4_v5 (GQA 4).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] racecheck at position 256 (untied_gqa4_v5)"
timeout 40 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model model/tests/data/untied_gqa4_v5 --tokens 2 --position 256 --watchdog-ms 120000 > $ROOT/sanitize-racecheck-small-p256.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-racecheck-small-p256.log | head -3
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] memcheck at position 256 (0.6B)"
timeout 150 "$cs" --tool memcheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 256 --watchdog-ms 120000 > $ROOT/sanitize-memcheck-p256.log 2>&1; echo rc=$?
grep -E "ERROR SUMMARY|^\| [0-9]" $ROOT/sanitize-memcheck-p256.log | head -3
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
