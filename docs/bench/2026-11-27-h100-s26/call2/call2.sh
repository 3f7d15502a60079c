#!/usr/bin/env bash
# Session 26 call 2 (binary: e30d6cb + QKV's early finisher inputs, off by default).
# 0.6B A/B at positions 1 and 512, 6 reps: head; qe (TESSERA_QKV_EARLY=1: the position,
# its rotary row and the q/k norm weights loaded before the head's ticket, so the last
# program's chain after it is one round trip); ar (TESSERA_ATTN_ROPE=1 at 0.6B: o_proj's
# programs norm and rope the raw heads, no QKV ticket; +2.7% in session 23, re-timed).
# Profiles of qe and ar at 1, qe at 512. 1.7B A/B at 512 (qe), 4 reps. The GPU tests with
# qe, the real-shape test at 0.6B with qe.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head qe ar
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for np in qe:1 ar:1 qe:512; do
  n=${np%%:*}; p=${np##*:}
  timeout 100 .gpu/bin/tessera-$n tune --model $d06 --tokens 64 --position $p --profile > $ROOT/prof/profile-$n-p$p.md 2> $ROOT/prof/profile-$n-p$p.err
  echo "profile $n p$p rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p$p.md | cut -d'|' -f2-5,10-15
done
echo "=== [$(date +%T)] GPU tests with qe (real shape at 0.6B)"
timeout 240 env TESSERA_HF_CKPT=$d06 TESSERA_QKV_EARLY=1 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-qe.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit|greedy" $ROOT/tests-qe.log | tail -16
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 4 "512" head qe
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
