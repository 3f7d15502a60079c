#!/usr/bin/env bash
# Session 26 call 3 (binary: e30d6cb + QKV's early finisher inputs and per-kernel wait
# prefetch sizes, both off by default; tune's retune now keeps qkv_early_finish, which
# calls 1 and 2 dropped: their qe/lmpp arms timed the default). 0.6B A/B at positions 1
# and 512, 6 reps: head; qe (TESSERA_QKV_EARLY=1); wq8 (QKV's wait prefetch 8 MiB, the
# others 4); wm2 / wm8 (the MLP's 2 / 8 MiB); wa0 (none for the attention/o_proj stages,
# which load their weights before the wait). 1.7B at 1 and 512, 2 reps.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head qe wq8 wm2 wm8 wa0
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
timeout 100 .gpu/bin/tessera-qe tune --model $d06 --tokens 64 --position 1 --profile > $ROOT/prof/profile-qe-p1.md 2> $ROOT/prof/profile-qe-p1.err
echo "profile qe p1 rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-qe-p1.md | cut -d'|' -f2-5,10-15
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 2 "1 512" head qe wq8 wm2 wm8 wa0
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
