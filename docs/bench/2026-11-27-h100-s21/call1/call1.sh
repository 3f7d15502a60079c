#!/usr/bin/env bash
# Session 21 call 1: 0.6B A/B main / head (merge loads first) / oh (o_proj per head), 4 reps, profiles.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export OUT=$ROOT/ab1
PROBE=0 GENERATE=0 PROFILE=1 POSITIONS="1 512" bash scripts/device_ab.sh 0.6b main head oh -- --tokens 128
export OUT=$ROOT/ab2
PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh 0.6b main head oh -- --tokens 128
cd $ROOT && rm -f ab1/all.tgz ab2/all.tgz && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
for f in $ROOT/ab*/tune-*.md; do echo "$(basename $(dirname $f))/$(basename $f) $(grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2)"; done
