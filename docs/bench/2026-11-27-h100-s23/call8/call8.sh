#!/usr/bin/env bash
# Session 23 call 8: binary b83cef6 (head: attn_head_residual through
# attend_head_cur, the new K/V row loaded from the cache into registers) against d699fde
# (old: its own online-softmax loop), 0.6B 6 reps at position 1; compute-sanitizer memcheck
# and racecheck at 4B (the rope specialisation with three row blocks a program), two steps
# from position 0.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
for i in 1 2 3; do
  export OUT=$ROOT/0.6b-ab$i
  PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1" bash scripts/device_ab.sh 0.6b head old -- --tokens 128 > $ROOT/0.6b-ab$i.log 2>&1
  rm -f $OUT/all.tgz
done
for n in head old; do
  v=$(for f in $ROOT/0.6b-ab*/tune-$n-p1-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
  echo "0.6b $n p1: $v"
done
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
mkdir -p $ROOT/d
ensure_ckpt 4b "$ROOT/d/hf-4b.log"
d4=$(ckpt_dir 4b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  left=$(( 575 - ($(date +%s) - T0) ))
  echo "=== [$(date +%T)] $tool at 4B, position 0 (limit ${left}s)"
  timeout --signal=KILL $left env TESSERA_CACHE_DIR=/tmp/tc "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d4 --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/d/sanitize-$tool.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $ROOT/d/sanitize-$tool.log | head -2
done
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
