#!/usr/bin/env bash
# Session 29 call 4. Binary: .gpu/bin/tessera = b150ca0 (QKV pairs the default up to hidden
# 1024: at 0.6B below position 128; PTX identical to call 1's `pairs`), tessera-base = the
# same with TESSERA_QKV_PAIRS=0 (main before, PTX identical to 3816f57's). 0.6B A/B at
# position 1, 6 reps; the GPU tests (real shape at 0.6B); compute-sanitizer memcheck and
# racecheck at 0.6B position 0 (the new specialisation); `tessera bench` at 0.6B.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
timeout 200 bash scripts/device_ab_reps.sh 0.6b 6 "1" base head
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU tests (real shape at 0.6B)"
timeout 200 env TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  echo "=== [$(date +%T)] $tool at position 0"
  timeout 150 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/sanitize-$tool-p0.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\| [0-9]" $ROOT/sanitize-$tool-p0.log | head -3
done
left=$(( 570 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] bench 0.6b (limit ${left}s)"
timeout $left env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d --peers .gpu/peers-0.6b.json --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -24
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
