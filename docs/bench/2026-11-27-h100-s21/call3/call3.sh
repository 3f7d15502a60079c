#!/usr/bin/env bash
# Session 21 call 3: A/B main / head / oh (o_proj per head, its wait in its body by the rule)
# at 0.6B (6 reps), 1.7B (6 reps), 4B (4 reps), contexts 1 and 512.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
run() {  # shape reps tokens
  for i in $(seq 1 $(( $2 / 2 ))); do
    export OUT=$ROOT/$1-ab$i
    PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh $1 main head oh -- --tokens $3 > $ROOT/$1-ab$i.log 2>&1
    rm -f $OUT/all.tgz
  done
  export OUT=$ROOT/$1-prof
  PROBE=0 GENERATE=0 PROFILE=1 POSITIONS="1" bash scripts/device_ab.sh $1 main oh -- --tokens $3 > $ROOT/$1-prof.log 2>&1; rm -f $OUT/all.tgz
  for n in main head oh; do for p in 1 512; do
    v=$(for f in $ROOT/$1-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$1 $n p$p: $v"
  done; done
  for n in main oh; do echo "$1 profile $n"; grep -E "^one launch|^\| stage" $ROOT/$1-prof/profile-$n.md; done
}
run 0.6b 6 128
run 1.7b 6 128
run 4b 4 64
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
