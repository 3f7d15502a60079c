#!/usr/bin/env bash
# Session 35 call 6 (H200). Binary: main c18fc5e. Issue 10's sanitizers at Qwen3-0.6B's real
# shape (random weights; until now racecheck ran on the committed GQA-4 test model only):
# compute-sanitizer racecheck on the decode megakernel, two steps at position 0 (the attention
# inside o_proj), then at position 256 (the split attention) as time allows.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
left() { echo $(( 570 - ($(date +%s) - T0) )); }
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for p in 0 256; do
  echo "=== [$(date +%T)] racecheck, decode megakernel at 0.6B's shape, position $p ($(left) s left)"
  timeout $(( $(left) - 20 )) "$cs" --tool racecheck --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position $p --watchdog-ms 300000 > $ROOT/racecheck-0.6b-p$p.log 2>&1; echo rc=$?
  grep -E "RACECHECK SUMMARY|^\| [0-9]" $ROOT/racecheck-0.6b-p$p.log | head -3
done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected*.json' --exclude=stdout.txt --exclude=env.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
