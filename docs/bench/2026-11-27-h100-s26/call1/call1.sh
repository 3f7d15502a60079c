#!/usr/bin/env bash
# Session 26 call 1 (binary: e30d6cb + the lm_head's pairs per program, off by default).
# 0.6B A/B at positions 1 and 512, 6 reps: head; lmpp (TESSERA_LM_PER_PROGRAM=1: one
# (max, argmax) pair per lm_head program, the merge with no dependent load); wp0 / wp8
# (--wait-prefetch-mib 0 / 8, against the default 4); rc4 (TESSERA_RESID_COPIES=4); qwib
# (QKV's stage waits in its body too). Profiles of head at 1 and 512. The GPU tests with
# lmpp on. 1.7B A/B at position 1, 2 reps.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head lmpp wp0 wp8 rc4 qwib
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for p in 1 512; do
  timeout 100 .gpu/bin/tessera tune --model $d06 --tokens 64 --position $p --profile > $ROOT/prof/profile-head-p$p.md 2> $ROOT/prof/profile-head-p$p.err
  echo "profile p$p rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-head-p$p.md | cut -d'|' -f2-5,10-15
done
echo "=== [$(date +%T)] GPU tests with lmpp"
timeout 200 env -u TESSERA_HF_CKPT TESSERA_LM_PER_PROGRAM=1 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-lmpp.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/tests-lmpp.log | tail -12
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 2 "1" head lmpp wp0 wp8 rc4
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
