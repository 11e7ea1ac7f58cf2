#!/usr/bin/env bash
# Record the issue-53 fixtures (annotate_plain, annotate_lightning, annotate_hf, annotate_jax) with
# `nsysan profile --annotate` on a GPU machine with nsys on PATH, trim them (workloads/trim.py), and
# measure the annotations' cost: the plain loop recorded with and without them, and the wrappers'
# own time per call (overhead.py) bare and under nsys.
#
#   OUT=/some/dir bash workloads/annotate/record.sh        # -> $OUT/annotate.tar.xz, $OUT/log.txt
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_annotate}
D=$T/fixtures
mkdir -p "$OUT" "$T" "$D"
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")/../.." && pwd)
cd "$HERE"
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
echo "gpu: $GPU; $NSYSV"
echo "--- nsys profile --help, Python options:"; nsys profile --help | grep -i -A3 "python" | head -40
rec() {  # name nsysan-profile-options -- command
  local name=$1; shift
  local t0=$SECONDS
  python3 -m nsysan profile -f --timeout 150 -o "$T/$name" "$@" > "$T/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - t0)) s"; grep -v "^\s*$" "$T/$name.log" | tail -8
  python3 - "$name" "$GPU" "$NSYSV" "$T/$name.log" > "$T/$name.json" <<'PY'
import json, sys
name, gpu, nsysv, log = sys.argv[1:]
cmd = next((l[len("running: "):].strip() for l in open(log, errors="replace") if l.startswith("running: ")), "?")
g = [s.strip() for s in gpu.split(",")]
print(json.dumps({"name": name, "command": cmd, "gpu": g[0], "driver": g[1], "gpu_memory": g[2], "nsys_version": nsysv}))
PY
}
for what in "$@"; do
case "$what" in
plain) rec annotate_plain --annotate -- python3 workloads/annotate/plain.py ;;
lightning) rec annotate_lightning --annotate -- python3 workloads/annotate/lightning_loop.py ;;
hf) rec annotate_hf --annotate -- python3 workloads/annotate/hf_trainer.py ;;
jax) rec annotate_jax --annotate --graph-nodes -- python3 workloads/annotate/jax_loop.py ;;
overhead)  # the plain loop without the annotations (same recording otherwise), then the wrappers' own cost
  rec plain_unannotated --no-annotate -- python3 workloads/annotate/plain.py
  python3 workloads/annotate/plain.py
  python3 workloads/annotate/overhead.py --backend package
  nsys profile -t nvtx -s none -o "$T/overhead" -f true python3 workloads/annotate/overhead.py --backend package ;;
overhead_ctypes)  # the wrappers' own cost through ctypes (the default where the library is found)
  python3 -c "import sys; sys.path.insert(0, 'nsysan/record/site'); import _nsysan_annotate as w; print('NVTX libraries:', w._nvtx_libraries()[:3])"
  python3 workloads/annotate/overhead.py --backend ctypes
  nsys profile -t nvtx -s none -o "$T/overhead_ctypes" -f true python3 workloads/annotate/overhead.py --backend ctypes ;;
esac
done
python3 workloads/trim.py --src "$T" --dest "$D" $(cd "$T" && ls annotate_*.sqlite 2>/dev/null | sed 's/\.sqlite$//')
tar -C "$T" -cJf "$OUT/annotate.tar.xz" fixtures $(cd "$T" && ls *.log *.json 2>/dev/null)
ls -la "$OUT"
