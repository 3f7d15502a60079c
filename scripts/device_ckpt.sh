# Sourced by the device_*.sh scripts on the GPU machine: one place that knows where the
# random-weight checkpoint of a Qwen3 shape lives and writes it when it is missing.
#   ckpt_dir SHAPE          prints its folder (/tmp/q06, /tmp/q17, /tmp/q4, /tmp/q8)
#   ensure_ckpt SHAPE LOG   writes it there with hf_reference.py (64 greedy steps, its fp32
#                           oracle and transformers' bf16 error; no timing) unless its
#                           expected.json exists; its output goes to LOG; fails if it fails
ckpt_dir() {
  case $1 in
  0.6b) echo /tmp/q06 ;; 1.7b) echo /tmp/q17 ;; 4b) echo /tmp/q4 ;; 8b) echo /tmp/q8 ;;
  *) echo "unknown shape $1 (0.6b, 1.7b, 4b, 8b)" >&2; return 1 ;;
  esac
}
ensure_ckpt() {
  local d
  d=$(ckpt_dir "$1") || return 1
  [[ -f $d/expected.json ]] && return 0
  echo "=== [$(date +%T)] hf_reference.py --shape $1 --out $d --no-bench"
  timeout 300 python3 .gpu/hf_reference.py --shape "$1" --out "$d" --steps 64 --no-bench > "$2" 2>&1 \
    || { tail -20 "$2"; return 1; }
}
