#!/usr/bin/env bash
# Session 28 call 5. Binaries: .gpu/bin/tessera = the argmax steps as selects (no branch),
# .gpu/bin/tessera-base = 521a0fb (main before). 0.6B at 1 and 512, 6 reps; 1.7B 4 reps if
# time is left (the whole call under 250 s).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
timeout 150 bash scripts/device_ab_reps.sh 0.6b 6 "1 512" base head
left=$(( 245 - ($(date +%s) - T0) ))
if (( left > 90 )); then
  echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
  timeout $left bash scripts/device_ab_reps.sh 1.7b 2 "1 512" base head
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
