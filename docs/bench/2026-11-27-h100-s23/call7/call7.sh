#!/usr/bin/env bash
# Session 23 call 7 (binary cbb3467; the decode step's PTX is call 6's at every shape,
# its 8B specialisation call 6's ino): at 1.7B compute-sanitizer memcheck and racecheck on the
# specialisation with the rope (two steps from position 0) and `tessera bench` (decode); at
# 8B the real-shape test and `tessera bench` (decode).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
mkdir -p $ROOT/d
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tc
ensure_ckpt 1.7b "$ROOT/d/hf-1.7b.log"
d17=$(ckpt_dir 1.7b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  echo "=== [$(date +%T)] $tool at 1.7B, position 0"
  timeout --signal=KILL 150 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d17 --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/d/sanitize-$tool.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $ROOT/d/sanitize-$tool.log | head -2
done
echo "=== [$(date +%T)] bench 1.7b"
timeout 120 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d17 --prompts none --json $ROOT/d/bench-1.7b.json > $ROOT/d/bench-1.7b.log 2>&1; echo rc=$?
sed -n '/^read bandwidth/p;/^| context/,/^$/p' $ROOT/d/bench-1.7b.log
ensure_ckpt 8b "$ROOT/d/hf-8b.log"
d8=$(ckpt_dir 8b)
echo "=== [$(date +%T)] real shape 8b"
timeout 200 env TESSERA_HF_CKPT=$d8 .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $ROOT/d/real-8b.log 2>&1; echo rc=$?
grep -E "first-logit|test result|panicked" $ROOT/d/real-8b.log | tail -3
left=$(( 580 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] bench 8b (limit ${left}s)"
timeout $left env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d8 --prompts none --json $ROOT/d/bench-8b.json > $ROOT/d/bench-8b.log 2>&1; echo rc=$?
sed -n '/^read bandwidth/p;/^| context/,/^$/p' $ROOT/d/bench-8b.log
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
