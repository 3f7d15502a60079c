#!/usr/bin/env bash
# More repetitions of a decode A/B in one device call: `device_ab.sh` (two repetitions a
# run, ABAB) run REPS / 2 times, then one line per binary and position with every ms/token,
# sorted (the median is the middle), e.g. `0.6b head p1: 0.722 0.724 0.729 0.731`.
#   device run (carry [".gpu"]): bash scripts/device_ab_reps.sh SHAPE REPS "POSITIONS" NAME...
# Each run's output under $ROOT/SHAPE-abI (ROOT: $OUT, else /tmp/out); the logs beside it.
set -uo pipefail
shape=${1:?usage: device_ab_reps.sh SHAPE REPS "POSITIONS" NAME...}
reps=${2:?reps}
positions=${3:?positions}
shift 3
ROOT=${ROOT:-${OUT:-/tmp/out}}
for i in $(seq 1 $(( reps / 2 ))); do
  OUT=$ROOT/$shape-ab$i PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="$positions" \
    bash "$(dirname "$0")/device_ab.sh" "$shape" "$@" -- --tokens 128 > "$ROOT/$shape-ab$i.log" 2>&1
  rm -f "$ROOT/$shape-ab$i/all.tgz"
done
for n in "$@"; do
  for p in $positions; do
    v=$(for f in "$ROOT/$shape"-ab*/tune-"$n"-p"$p"-*.md; do
          grep -E '^\| [0-9]' "$f" | head -1 | cut -d'|' -f2
        done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$shape $n p$p: $v"
  done
done
