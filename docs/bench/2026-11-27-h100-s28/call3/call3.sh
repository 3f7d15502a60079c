#!/usr/bin/env bash
# Session 28 call 3 (binary in .gpu/commit: main's default, argmax_merge's max once;
# .gpu/bin/tessera-base = 8aedbd6, session 26's main, for 8B). The GPU tests with the
# real-shape test at 0.6B; compute-sanitizer memcheck and racecheck at 0.6B position 0, and
# racecheck at position 256 (the split attention and its merge) on the small test model;
# `tessera bench` at 0.6B (transformers from session 25); 8B: base vs head and its bench.
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
for run in "memcheck 0 $d" "racecheck 0 $d" "racecheck 256 model/tests/data/tied_gqa2_v4"; do
  set -- $run
  echo "=== [$(date +%T)] $1 at position $2 ($3)"
  timeout 150 "$cs" --tool $1 --error-exitcode 9 .gpu/bin/tessera tune --model $3 --tokens 2 --position $2 --watchdog-ms 120000 > $ROOT/sanitize-$1-p$2.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-$1-p$2.log | head -3
done
echo "=== [$(date +%T)] bench 0.6b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d --peers .gpu/peers-0.6b.json --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -24
left=$(( 570 - ($(date +%s) - T0) ))
if (( left > 200 )); then
  rm -rf /tmp/q06
  ensure_ckpt 8b "$ROOT/hf-8b.log"
  left=$(( 570 - ($(date +%s) - T0) ))
  echo "=== [$(date +%T)] 8b A/B (limit $((left - 50))s)"
  timeout $((left - 50)) bash scripts/device_ab_reps.sh 8b 2 "1" base head
  left=$(( 575 - ($(date +%s) - T0) ))
  echo "=== [$(date +%T)] bench 8b (limit ${left}s)"
  timeout $left .gpu/bin/tessera bench --model $(ckpt_dir 8b) --json $ROOT/bench-8b.json > $ROOT/bench-8b.log 2>&1; echo rc=$?
  sed -n '/^tessera bench/,$p' $ROOT/bench-8b.log | head -14
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
