#!/usr/bin/env bash
# Session 24 call 3 (binary 16cdc06): the own-weights L2 prefetch with one line test per
# 16-byte vector (call 2's per-element tests were slower in every variant), against the
# default (head); q: QKV before its wait; m: the MLP before its wait; qm: both; qM: QKV, and
# the MLP as the stage before it starts. 0.6B 6 reps at positions 1 and 512, profiles of q
# and qm; 1.7B 4 reps of head, q and qm.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
run() {  # shape reps positions names...
  local shape=$1 reps=$2 positions=$3; shift 3
  for i in $(seq 1 $(( reps / 2 ))); do
    export OUT=$ROOT/$shape-ab$i
    PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="$positions" bash scripts/device_ab.sh $shape "$@" -- --tokens 128 > $ROOT/$shape-ab$i.log 2>&1
  done
  for n in "$@"; do for p in $positions; do
    v=$(for f in $ROOT/$shape-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$shape $n p$p: $v"
  done; done
}
run 0.6b 6 "1 512" head q m qm qM
echo "=== [$(date +%T)] profiles"
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/d
mkdir -p $OUT
d06=$(ckpt_dir 0.6b)
for n in head q qm; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 120 env TESSERA_CACHE_DIR=/tmp/tessera-cache $b tune --model $d06 --tokens 64 --profile > $OUT/profile-$n.md 2> $OUT/profile-$n.err
  echo "profile $n rc=$?"; grep -E "^\| stage" $OUT/profile-$n.md | cut -d'|' -f2-5,10-15
done
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7B (left ${left}s)"
[[ $left -gt 150 ]] && run 1.7b 4 "1 512" head q qm
echo "=== [$(date +%T)] done"
find $ROOT -name '*.json' -path '*tune-*' -delete
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && rm -rf $ROOT/0.6b-ab* $ROOT/1.7b-ab*/ && mv /tmp/all.tgz $ROOT/all.tgz
