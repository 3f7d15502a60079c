#!/usr/bin/env bash
# Session 28 call 4 (binary in .gpu/commit, main's default): compute-sanitizer racecheck at
# 0.6B position 256 (the split attention and o_proj's merge), alone in its call.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] racecheck at position 256 ($d)"
timeout 540 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 1 --position 256 --watchdog-ms 120000 > $ROOT/sanitize-racecheck-p256.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-racecheck-p256.log | head -3
echo "=== [$(date +%T)] done"
