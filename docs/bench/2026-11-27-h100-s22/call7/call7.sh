#!/usr/bin/env bash
# Session 22 call 7: compute-sanitizer memcheck and racecheck on the 0.6B decode step's
# ahead specialisation (two steps of `tessera tune` at position 2048, where a step launches
# it). (The default specialisation, unchanged below 1024 positions, was clean in session 21.)
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export OUT=$ROOT/s
mkdir -p $OUT
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
ensure_ckpt 0.6b "$OUT/hf-0.6b.log"
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for p in 2048; do for tool in memcheck racecheck; do
  echo "=== [$(date +%T)] $tool at $p"
  timeout --signal=KILL 150 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model /tmp/q06 --tokens 2 --position $p --watchdog-ms 120000 > $OUT/sanitize-$tool-$p.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ms/token|^\| [0-9]" $OUT/sanitize-$tool-$p.log | head -4
done; done
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
