#!/usr/bin/env bash
# Session 26 call 5 (binary in .gpu/commit: the session's default, the MLP's wait prefetch
# 2 MiB up to hidden 2560): the committed GPU tests with the real-shape test at 0.6B;
# compute-sanitizer memcheck and racecheck on two steps at position 0; `tessera bench` at
# 0.6B (transformers' numbers from session 25's call 3, same shape and GPU kind), then at
# 1.7B if the time allows.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU tests (real shape at 0.6B)"
timeout 200 env TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
echo "=== [$(date +%T)] bench 0.6b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d --peers .gpu/peers-0.6b.json --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -24
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  echo "=== [$(date +%T)] $tool at position 0"
  timeout 150 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/sanitize-$tool-p0.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-$tool-p0.log | head -3
done
left=$(( 585 - ($(date +%s) - T0) ))
if (( left > 200 )); then
  echo "=== [$(date +%T)] bench 1.7b (limit ${left}s)"
  timeout $left bash -c "source scripts/device_ckpt.sh; ensure_ckpt 1.7b $ROOT/hf-1.7b.log && env TESSERA_CACHE_DIR=\$(mktemp -d) .gpu/bin/tessera bench --model \$(ckpt_dir 1.7b) --json $ROOT/bench-1.7b.json > $ROOT/bench-1.7b.log 2>&1"; echo rc=$?
  sed -n '/^tessera bench/,$p' $ROOT/bench-1.7b.log | head -24
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
