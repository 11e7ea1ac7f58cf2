#!/usr/bin/env bash
# Record um_cpu_writes (workloads/um_cpu_writes.py --mode faults, issue 49 item 4) and its fix
# um_cpu_hostcopy (--mode host_copy) on a GPU machine with nsys on PATH, trim both, then the measured
# re-run of the three modes without the profiler (--measure 3) into measure.log.
#
#   OUT=/some/dir bash workloads/record_um_cpu.sh
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_um_cpu}
mkdir -p "$OUT" "$T"
export PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
HERE=$(cd "$(dirname "$0")" && pwd)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
FLAGS=(-t cuda,nvtx,osrt -s none --osrt-threshold=10000 --cpuctxsw=none --cuda-um-gpu-page-faults=true
       --cuda-um-cpu-page-faults=true --export sqlite -f true)
rc=0
for spec in "um_cpu_writes faults" "um_cpu_hostcopy host_copy"; do
  read -r n mode <<< "$spec"
  (cd "$HERE" && timeout -k 10 120 nsys profile "${FLAGS[@]}" -o "$T/$n" python3 um_cpu_writes.py --mode "$mode") \
    > "$T/$n.log" 2>&1 || rc=1
  python3 - "$n" "nsys profile ${FLAGS[*]} -o $n python3 workloads/um_cpu_writes.py --mode $mode" "$GPU" "$NSYSV" \
    > "$T/$n.json" <<'PY'
import json, sys
name, cmd, gpu, nsysv = sys.argv[1:]
g = [s.strip() for s in gpu.split(",")]
print(json.dumps({"name": name, "command": cmd, "gpu": g[0], "driver": g[1], "gpu_memory": g[2], "nsys_version": nsysv}))
PY
  grep -E '^\[|Error|Traceback' "$T/$n.log" | tail -5
done
rm -f "$T"/*.nsys-rep
(cd "$HERE" && timeout -k 10 150 python3 um_cpu_writes.py --measure 3 --steps 30) > "$T/measure.log" 2>&1 || rc=1
cat "$T/measure.log"
(cd "$HERE" && python3 -c "
import sys, trim
trim.RESULT_TAGS += ('[um_cpu_writes]',)
sys.exit(trim.main(sys.argv[1:]))" --src "$T" --dest "$T/fixtures" um_cpu_writes um_cpu_hostcopy) || rc=1
cp "$T"/*.log "$T"/*.json "$T/fixtures/" 2>/dev/null
ls -la "$T" "$T"/fixtures/*
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
exit $rc
