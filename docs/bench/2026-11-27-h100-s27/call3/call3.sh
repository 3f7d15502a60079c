#!/usr/bin/env bash
# Session 27 call 3 (binary in .gpu/commit: per-row values on, the attention's 1/l once):
# the GPU tests with the real-shape test at 0.6B; compute-sanitizer memcheck and racecheck
# at position 0 and racecheck at 256; `tessera bench` at 0.6B (transformers from session
# 25); Nsight Compute at 0.6B (per SASS instruction); then 4B base (8aedbd6) vs head.
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
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for run in "memcheck 0" "racecheck 0" "racecheck 256"; do
  set -- $run
  echo "=== [$(date +%T)] $1 at position $2"
  timeout 150 "$cs" --tool $1 --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position $2 --watchdog-ms 120000 > $ROOT/sanitize-$1-p$2.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-$1-p$2.log | head -3
done
echo "=== [$(date +%T)] bench 0.6b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d --peers .gpu/peers-0.6b.json --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -24
echo "=== [$(date +%T)] ncu 0.6b"
timeout 200 env OUT=$ROOT/ncu bash scripts/device_ncu.sh 0.6b > $ROOT/ncu.log 2>&1; echo rc=$?
gzip -f $ROOT/ncu/sass-0.6b.csv 2>/dev/null; rm -f $ROOT/ncu/*.safetensors; grep -E "Duration|DRAM Throughput|Issued Ipc" $ROOT/ncu.log | head -5
left=$(( 575 - ($(date +%s) - T0) ))
if (( left > 100 )); then
  echo "=== [$(date +%T)] 4b A/B (limit ${left}s)"
  timeout $left bash scripts/device_ab_reps.sh 4b 2 "1" base head
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude='*.ncu-rep' . && mv /tmp/all.tgz $ROOT/all.tgz
