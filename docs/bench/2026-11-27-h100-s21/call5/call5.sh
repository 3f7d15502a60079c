#!/usr/bin/env bash
# Session 21 call 5: on the landing binary (o_proj per head up to hidden 2560): `tessera bench`
# at 0.6B (kernels engine beside it), then compute-sanitizer memcheck and racecheck on two
# steps of the 0.6B decode megakernel.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export OUT=$ROOT/d
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
mkdir -p $OUT
ensure_ckpt 0.6b "$OUT/hf-0.6b.log"
echo "=== [$(date +%T)] bench"
timeout 200 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model /tmp/q06 --json $OUT/bench-0.6b.json > $OUT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $OUT/bench-0.6b.log
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  echo "=== [$(date +%T)] $tool"
  timeout --signal=KILL 170 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model /tmp/q06 --tokens 2 --watchdog-ms 120000 > $OUT/sanitize-$tool.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ms/token|^\| [0-9]" $OUT/sanitize-$tool.log | head -5
done
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
