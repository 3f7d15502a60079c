#!/usr/bin/env bash
# Session 27 call 4 (binary in .gpu/commit: per-row values on, the attention's 1/l once):
# compute-sanitizer racecheck at position 256 (the split attention and o_proj's merge, which
# the change rewrote; call 3's 150 s limit was too short), then `tessera bench` at 1.7B.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] racecheck at position 256"
timeout 380 "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 256 --watchdog-ms 300000 > $ROOT/sanitize-racecheck-p256.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-racecheck-p256.log | head -3
left=$(( 585 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] bench 1.7b (limit ${left}s)"
timeout $left bash -c "source scripts/device_ckpt.sh; ensure_ckpt 1.7b $ROOT/hf-1.7b.log && env TESSERA_CACHE_DIR=\$(mktemp -d) .gpu/bin/tessera bench --model \$(ckpt_dir 1.7b) --json $ROOT/bench-1.7b.json > $ROOT/bench-1.7b.log 2>&1"; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-1.7b.log | head -24
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
