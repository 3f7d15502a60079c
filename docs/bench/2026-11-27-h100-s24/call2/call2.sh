#!/usr/bin/env bash
# Session 24 call 2 (binary 5332dde: call 1 timed the default for every variant, a retune dropped the option): each stage's CTAs prefetch into L2 the weights their
# own programs will load (TESSERA_PREFETCH_OWN), against the default (head: the first 4 MiB
# of each weight window); q: QKV before its wait; qm: and the MLP before its wait; qM: the
# MLP as the stage before it starts; all: qM and o_proj as the stage before it starts.
# 0.6B 6 reps at positions 1 and 512, 1.7B 4 reps; one profile of each at 0.6B.
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
run 0.6b 6 "1 512" head q qm qM all
echo "=== [$(date +%T)] profiles"
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/d
mkdir -p $OUT
d06=$(ckpt_dir 0.6b)
for n in head qm qM all; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 120 env TESSERA_CACHE_DIR=/tmp/tessera-cache $b tune --model $d06 --tokens 64 --profile > $OUT/profile-$n.md 2> $OUT/profile-$n.err
  echo "profile $n rc=$?"; grep -E "^\| stage" $OUT/profile-$n.md | cut -d'|' -f2-5,10-15
done
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7B (left ${left}s)"
[[ $left -gt 150 ]] && run 1.7b 4 "1 512" head qm qM all
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
