#!/usr/bin/env bash
# Session 23 call 4 (binary 29195be): below one tile, o_proj's programs also norm
# and rope the raw QKV heads, the QKV stage without tickets (rope: TESSERA_ATTN_ROPE=1)
# against the default (head); 0.6B 6 reps and 1.7B 2 reps at position 1; the committed GPU
# tests; one profile of each at 0.6B; memcheck and racecheck on the rope variant.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
run() {  # shape reps positions names...
  local shape=$1 reps=$2 positions=$3; shift 3
  for i in $(seq 1 $(( reps / 2 ))); do
    export OUT=$ROOT/$shape-ab$i
    PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="$positions" bash scripts/device_ab.sh $shape "$@" -- --tokens 128 > $ROOT/$shape-ab$i.log 2>&1
    rm -f $OUT/all.tgz
  done
  for n in "$@"; do for p in $positions; do
    v=$(for f in $ROOT/$shape-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$shape $n p$p: $v"
  done; done
}
run 0.6b 6 "1" head rope
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh committed > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -E "test result|^test |FAILED|panicked" $ROOT/tests/*.log | tail -10
export OUT=$ROOT/d
mkdir -p $OUT
d06=$(ckpt_dir 0.6b)
for n in head rope; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 120 env TESSERA_CACHE_DIR=/tmp/tessera-cache $b tune --model $d06 --tokens 64 --profile > $OUT/profile-$n.md 2> $OUT/profile-$n.err
  echo "profile $n rc=$?"; grep -E "^\| stage" $OUT/profile-$n.md | cut -d'|' -f2-5,10-15
done
run 1.7b 2 "1" head rope
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  left=$(( 570 - ($(date +%s) - T0) ))
  echo "=== [$(date +%T)] $tool, rope, at position 0 (limit ${left}s)"
  timeout --signal=KILL $left env TESSERA_ATTN_ROPE=1 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d06 --tokens 2 --position 0 --watchdog-ms 120000 > $OUT/sanitize-$tool.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/sanitize-$tool.log | head -2
done
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
