#!/usr/bin/env bash
# Where the decode megakernel's warps stall, from the hardware (Nsight Compute), in ONE
# device call: one decode step of `tessera generate --engine megakernel` on a random-weight
# checkpoint, its warp-state, scheduler, throughput and memory sections.
#   here:  scripts/pack_gpu.sh (or a .gpu/ with bin/tessera and the scripts it copies)
#   device run: carry [".gpu"], command: bash scripts/device_ncu.sh SHAPE [tessera flags]
# Output under $OUT: ncu-SHAPE.txt (the sections as ncu prints them, every stall reason's
# samples), ncu-SHAPE.ncu-rep (the report) and sass-SHAPE.csv (samples per SASS instruction). The clocks are left
# alone (--clock-control none: .library/device/METHOD.md). ncu replays the launch once per
# pass and restores memory between passes, so the step's self-resetting sync words hold.
set -uo pipefail
shape=${1:?usage: device_ncu.sh SHAPE [tessera generate flags]}
shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
source scripts/device_ckpt.sh
ensure_ckpt "$shape" "$OUT/hf-$shape.log" || exit 1
d=$(ckpt_dir "$shape")
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -x $ncu ]] || { echo "no ncu on this machine"; exit 1; }
echo "=== [$(date +%T)] $ncu: the 4th decode_step launch"
timeout 400 "$ncu" --clock-control none --kernel-name regex:decode_step --launch-skip 3 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section SourceCounters \
  --metrics regex:smsp__pcsamp_warps_issue_stalled_.* --print-details all -o "$OUT/ncu-$shape" \
  .gpu/bin/tessera generate --model "$d" --engine megakernel --prompt-ids 1 --max-new-tokens 8 "$@" \
  > "$OUT/ncu-$shape.log" 2> "$OUT/ncu-$shape.err"
echo "rc=$?"
"$ncu" --import "$OUT/ncu-$shape.ncu-rep" --print-details all > "$OUT/ncu-$shape.txt" 2>&1
# Per SASS instruction: the warp-stall samples by reason (no source lines: NVRTC's C is
# not on disk), to say which instructions the stalls sit at.
"$ncu" --import "$OUT/ncu-$shape.ncu-rep" --page source --csv --print-source sass > "$OUT/sass-$shape.csv" 2>&1
echo "sass rows: $(wc -l < "$OUT/sass-$shape.csv")"
tail -5 "$OUT/ncu-$shape.err"
grep -E "stalled|Stall|Warp Cycles|Issued|Eligible|Duration|Throughput|Registers|Hit Rate" "$OUT/ncu-$shape.txt" | head -60
echo "=== [$(date +%T)] done"
