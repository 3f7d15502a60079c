#!/usr/bin/env bash
# Session 21 call 2: 0.6B A/B main / head / oh / ohw, 12 reps at contexts 1 and 512; profile ohw;
# the GPU tests with o_proj per head (committed checkpoints, the real shape at 0.6B).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
for i in 1 2 3 4 5 6; do
  export OUT=$ROOT/ab$i
  PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh 0.6b main head oh ohw -- --tokens 128 > $ROOT/ab$i.log 2>&1
  rm -f $OUT/all.tgz
done
export OUT=$ROOT/prof
PROBE=0 GENERATE=0 PROFILE=1 POSITIONS="1" bash scripts/device_ab.sh 0.6b ohw -- --tokens 128 > $ROOT/prof.log 2>&1; rm -f $OUT/all.tgz
export OUT=$ROOT/tests
TESSERA_O_HEADS=1 PEERS=0 BENCH=0 bash scripts/device_decode.sh committed 0.6b > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
python3 - <<'PY'
import glob, re, statistics, os
root = os.environ.get("ROOT", "/tmp/out")
PY
for n in main head oh ohw; do for p in 1 512; do
  v=$(for f in $ROOT/ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
  echo "$n p$p: $v"
done; done
grep -E "test result|^test |relative|greedy|FAILED|panicked" $ROOT/tests/*.log | tail -30
grep -E "^one launch|^\| stage" $ROOT/prof/profile-ohw.md
