#!/usr/bin/env bash
# The overhead of `nsysan profile --diagnose` (docs/inputs.md, "Recording for a diagnosis"), on a GPU machine with
# nsys on PATH, from the repository root (nsysan importable: installed, or PYTHONPATH=$PWD):
#
#   OUT=/some/dir bash workloads/profile_overhead.sh [ROUNDS]
#
# Interleaved rounds of: the sync loop (diagnose.py --mode sync) bare, under plain nsys and under the preset;
# the launch loop (launch_bound.py) bare, plain, preset, and preset with --cuda-backtrace all. Each line gives
# the workload's own per-step timer and the whole command's wall time; the logs go to $OUT/overhead-logs.tar.
set -o pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
ROUNDS=${1:-5}
export PYTHONUNBUFFERED=1
OV=$(mktemp -d)
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
run() {  # label cmd...
  local label=$1; shift
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" > "$OV/$label.log" 2>&1; rc=$?
  t1=$(date +%s.%N)
  echo "$label rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,2))") :: $(grep -h '\[diagnose\] mode\|\[launch_bound\]' "$OV/$label.log" | head -1)"
  rm -f "$OV"/*.sqlite "$OV"/*.nsys-rep
}
W=(python3 diagnose.py --mode sync --steps 100)
L=(python3 launch_bound.py --steps 300 --kernels 100)
for i in $(seq 1 "$ROUNDS"); do
  run sync_bare_$i "${W[@]}"
  run sync_plain_$i nsys profile -t cuda,nvtx,osrt -s none --export sqlite -f true -o "$OV/p" "${W[@]}"
  run sync_diag_$i python3 -m nsysan profile --diagnose -f -o "$OV/d" -- "${W[@]}"
  run launch_bare_$i "${L[@]}"
  run launch_plain_$i nsys profile -t cuda,nvtx,osrt -s none --export sqlite -f true -o "$OV/p" "${L[@]}"
  run launch_diag_$i python3 -m nsysan profile --diagnose -f -o "$OV/d" -- "${L[@]}"
  run launch_diagall_$i python3 -m nsysan profile --diagnose --cuda-backtrace all -f -o "$OV/d" -- "${L[@]}"
done
(cd "$OV" && tar -cf "$OUT/overhead-logs.tar" ./*.log)
