#!/usr/bin/env bash
# Record the issue-48 fixtures (training loops with no NVTX range of their own) on the GPU machine,
# nsys on PATH (source .devkit/nsys-env.sh), from the repository root:
#
#   OUT=/some/dir bash workloads/unannotated/record.sh
#
# Each fixture: CPU sampling with Python sampling (1 kHz), exported with blobs (Python frames), trimmed
# with workloads/trim.py --keep-callchains, written as $OUT/<name>.sqlite.xz. Then the measured re-run
# without nsys: lightning_input.py --workers 0 and --workers 4 alternately, 3 pairs, into $OUT/measured.txt.
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_unannotated}
mkdir -p "$OUT" "$T"
export PYTHONUNBUFFERED=1
W=workloads/unannotated
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1; nsys --version;
  python3 -c "import torch, lightning, numpy; print('torch', torch.__version__, 'lightning', lightning.__version__, 'numpy', numpy.__version__)"; } > "$T/info.txt" 2>&1
FLAGS=(-t cuda,nvtx,osrt -s process-tree --python-sampling=true --python-sampling-frequency=1000 --cpuctxsw=none -f true)
rec() {  # name args...
  local name=$1; shift
  echo "nsys profile ${FLAGS[*]} -o $name python3 $*; nsys export --type sqlite --include-blobs=true -o $name.sqlite $name.nsys-rep" > "$T/$name.log"
  local t0=$(date +%s.%N)
  timeout 150 nsys profile "${FLAGS[@]}" -o "$T/$name" python3 "$@" >> "$T/$name.log" 2>&1 || echo "profile rc=$?" >> "$T/$name.log"
  echo "profile wall $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" $t0) s" >> "$T/$name.log"
  timeout 120 nsys export --type sqlite --include-blobs=true -f true -o "$T/$name.sqlite" "$T/$name.nsys-rep" >> "$T/$name.log" 2>&1 || echo "export rc=$?" >> "$T/$name.log"
  rm -f "$T/$name.nsys-rep"
  ls -la "$T/$name.sqlite" >> "$T/$name.log" 2>&1
  python3 workloads/trim.py --keep-callchains --src "$T" --dest "$T/fx" "$name" >> "$T/$name.log" 2>&1 && cp "$T/fx/$name/trace.sqlite.xz" "$OUT/$name.sqlite.xz"
  grep -h '^\[' "$T/$name.log"
}
rec lightning_input $W/lightning_input.py --workers 0
rec lightning_workers $W/lightning_input.py --workers 4
rec varying_shapes $W/varying_steps.py --mode shapes
rec varying_validation $W/varying_steps.py --mode validation
: > "$OUT/measured.txt"
for pair in 1 2 3; do
  for w in 0 4; do
    echo "pair $pair workers $w:" >> "$OUT/measured.txt"
    timeout 90 python3 $W/lightning_input.py --workers $w 2>&1 | grep '^\[lightning_input\]' >> "$OUT/measured.txt"
  done
done
cat "$OUT/measured.txt"
(cd "$T" && tar -cf "$OUT/logs.tar" *.log info.txt)
cat "$T/info.txt"; ls -la "$OUT"
