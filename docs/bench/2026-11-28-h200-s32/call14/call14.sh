#!/usr/bin/env bash
# Session 32 call 14. Binary: .gpu/bin/tessera = this session's tree with MegaOptions::publish_first
# (off; the default's generated C identical to main's). On the H200, 0.6B: the per-stage
# profile at positions 1 and 512, and the step with no waits (--no-waits --launch-only).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
for p in 1 512; do
  echo "=== [$(date +%T)] tune --profile p$p"
  timeout 120 .gpu/bin/tessera tune --model $d --position $p --tokens 128 --profile > $ROOT/profile-p$p.md 2>&1; echo rc=$?
  echo "=== [$(date +%T)] tune --no-waits --launch-only p$p"
  timeout 120 .gpu/bin/tessera tune --model $d --position $p --tokens 128 --no-waits --launch-only > $ROOT/nowaits-p$p.md 2>&1; echo rc=$?
  grep -E "^\| [0-9]" $ROOT/nowaits-p$p.md | head -3
done
grep -B2 -A30 -i "stage" $ROOT/profile-p1.md | head -60
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
