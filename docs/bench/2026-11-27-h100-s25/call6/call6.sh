#!/usr/bin/env bash
# Session 25 call 6 (binary in .gpu/commit: the session's final default, the split
# attention waiting in its body at 0.6B): the committed GPU tests; `tessera bench` at 0.6B
# (transformers' numbers from call 3, same shape and GPU kind); memcheck and racecheck on
# two steps at position 256 (the split attention).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] committed tests"
timeout 200 env -u TESSERA_HF_CKPT .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests.log | tail -10
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] bench 0.6b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d --peers .gpu/peers-0.6b.json --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^| context/,/^$/p' $ROOT/bench-0.6b.log | head -8; grep "read bandwidth" $ROOT/bench-0.6b.log
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "=== [$(date +%T)] memcheck at position 256"
timeout 120 "$cs" --tool memcheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 256 --watchdog-ms 120000 > $ROOT/sanitize-memcheck-p256.log 2>&1; echo rc=$?
grep -E "ERROR SUMMARY" $ROOT/sanitize-memcheck-p256.log | head -2
left=$(( 590 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] racecheck at position 256 (limit ${left}s)"
timeout $left "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 256 --watchdog-ms 600000 > $ROOT/sanitize-racecheck-p256.log 2>&1; echo rc=$?
grep -E "RACECHECK SUMMARY" $ROOT/sanitize-racecheck-p256.log | head -2
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
