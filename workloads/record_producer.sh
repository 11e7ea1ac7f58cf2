#!/usr/bin/env bash
# Record the blocked-on-a-producer fixtures (workloads/producer_wait.py, issue 49 item 5) on a GPU
# machine with nsys on PATH, and the measured re-run with more producers, without the profiler.
#
#   OUT=/some/dir bash workloads/record_producer.sh
#
# waits_producer: queue.Queue fed by one producer thread; waits_producer_event: threading.Event
# handoff with one producer thread; waits_producer_mp: one producer process through a
# multiprocessing Pipe. Each with thread scheduling, OS runtime calls, CPU and Python sampling,
# exported with blobs (Python frames live in them). The exports come back xz-compressed, untrimmed
# (trimmed here with workloads/trim.py); measure.log holds producer_wait.py --measure (1, 2, 4
# producers, per-step time, no profiler).
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_producer}
mkdir -p "$OUT" "$T"
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
rc=0
FLAGS=(-t cuda,nvtx,osrt --cpuctxsw=process-tree -s process-tree --python-sampling=true -f true)
for spec in waits_producer:queue waits_producer_event:event waits_producer_mp:pipe; do
  n=${spec%%:*}; mode=${spec#*:}
  (cd "$HERE" && timeout 90 nsys profile "${FLAGS[@]}" -o "$T/$n" python3 producer_wait.py --mode $mode) > "$T/$n.log" 2>&1 || rc=1
  timeout 60 nsys export --type sqlite --include-blobs=true -f true -o "$T/$n.sqlite" "$T/$n.nsys-rep" >> "$T/$n.log" 2>&1 || rc=1
  python3 - "$n" "nsys profile ${FLAGS[*]} -o $n python3 workloads/producer_wait.py --mode $mode; nsys export --type sqlite --include-blobs=true -o $n.sqlite $n.nsys-rep" "$GPU" "$NSYSV" > "$T/$n.json" <<'PY'
import json, sys
name, cmd, gpu, nsysv = sys.argv[1:]
g = [s.strip() for s in gpu.split(",")]
print(json.dumps({"name": name, "command": cmd, "gpu": g[0], "driver": g[1], "gpu_memory": g[2], "nsys_version": nsysv}))
PY
done
rm -f "$T"/*.nsys-rep
(cd "$HERE" && for mode in queue event pipe; do timeout 60 python3 producer_wait.py --mode $mode --steps 200 --measure 1,2,4; done) > "$T/measure.log" 2>&1 || rc=1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$T/measure.log" 2>&1
nproc >> "$T/measure.log"
ls -la "$T"
grep -h '\[producer_wait\]' "$T"/*.log
for f in "$T"/*.sqlite; do xz -T0 -6 -c "$f" > "$OUT/$(basename "$f").xz"; done
(cd "$T" && tar -cf "$OUT/logs.tar" *.log *.json)
ls -la "$OUT"
exit $rc
