# Sourced by the record_*.sh scripts after they set T_DEFAULT (their scratch folder): the shared set-up.
# OUT (where the results go, default ./out), T (scratch, REC_DIR or T_DEFAULT), HERE (workloads/), GPU and
# NSYSV (the machine's GPU and nsys version, for provenance), and prov NAME COMMAND, which writes
# $T/NAME.json (name, command, GPU, driver, GPU memory, nsys version) for workloads/trim.py's README.
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-$T_DEFAULT}
mkdir -p "$OUT" "$T"
export PYTHONUNBUFFERED=1
HERE=$(cd "$(dirname "$0")" && pwd)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
prov() {  # name command
  python3 - "$1" "$2" "$GPU" "$NSYSV" > "$T/$1.json" <<'PY'
import json, sys
name, cmd, gpu, nsysv = sys.argv[1:]
g = [s.strip() for s in gpu.split(",")]
print(json.dumps({"name": name, "command": cmd, "gpu": g[0], "driver": g[1], "gpu_memory": g[2], "nsys_version": nsysv}))
PY
}
