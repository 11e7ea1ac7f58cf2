#!/usr/bin/env bash
# Record the issue-24 fixtures from workloads/diagnose.py on a GPU machine with nsys on PATH.
#
#   OUT=/some/dir bash workloads/record_diagnose.sh fixtures [full] [launch]
#   (or one fixture: waits_native, waits_sync, metrics_mix)
#
# fixtures: waits_native  CPU sampling + CUDA backtraces, no Python sampling (native frames only);
#           waits_sync    CPU + Python sampling, CUDA + Python backtraces, exported with blobs;
#           metrics_mix   GPU metrics (device 0, 10 kHz) over named phases in an NVTX step;
#           each trimmed (workloads/trim.py --keep-callchains) with nsys stats references, in fixtures.tar.
# full:     full_diag, every input at once (GPU metrics + CPU/Python sampling + CUDA/Python backtraces,
#           exported with blobs): a 100-200 MB export for speed work, xz'd and split into 15 MB parts.
# launch:   launch_real, launch_bound.py --steps 4000 --kernels 250 under -t cuda,nvtx,osrt -s none.
T_DEFAULT=/tmp/rec_diag
. "$(dirname "$0")/record_common.sh"
stats() {  # the nsys stats reference reports next to an export (as record.py writes them)
  (cd "$HERE" && python3 -c "import sys; from pathlib import Path; from record import stats; stats(Path(sys.argv[1]), 'nsys')" "$1")
}
rc=0
for what in "$@"; do
case "$what" in
fixtures|waits_native|waits_sync|metrics_mix)
  names=()
  if [ "$what" = fixtures ] || [ "$what" = waits_native ]; then
  NFLAGS=(-t cuda,nvtx,osrt -s process-tree --python-sampling=false --cudabacktrace=all --cpuctxsw=none
          --export sqlite -f true)
  (cd "$HERE" && nsys profile "${NFLAGS[@]}" -o "$T/waits_native" python3 diagnose.py --mode native) > "$T/waits_native.log" 2>&1 || rc=1
  prov waits_native "nsys profile ${NFLAGS[*]} -o waits_native python3 workloads/diagnose.py --mode native"
  names+=(waits_native)
  fi
  if [ "$what" = fixtures ] || [ "$what" = waits_sync ]; then
  PYFLAGS=(-t cuda,nvtx,osrt -s process-tree --python-sampling=true --python-sampling-frequency=2000
           --cudabacktrace=all --python-backtrace=cuda --cpuctxsw=none -f true)
  (cd "$HERE" && nsys profile "${PYFLAGS[@]}" -o "$T/waits_sync" python3 diagnose.py --mode sync) > "$T/waits_sync.log" 2>&1 || rc=1
  nsys export --type sqlite --include-blobs=true -f true -o "$T/waits_sync.sqlite" "$T/waits_sync.nsys-rep" >> "$T/waits_sync.log" 2>&1 || rc=1
  prov waits_sync "nsys profile ${PYFLAGS[*]} -o waits_sync python3 workloads/diagnose.py --mode sync; nsys export --type sqlite --include-blobs=true -o waits_sync.sqlite waits_sync.nsys-rep"
  names+=(waits_sync)
  fi
  if [ "$what" = fixtures ] || [ "$what" = metrics_mix ]; then
  MFLAGS=(-t cuda,nvtx -s none --cpuctxsw=none --gpu-metrics-devices=0 --gpu-metrics-frequency=10000 --export sqlite -f true)
  (cd "$HERE" && nsys profile "${MFLAGS[@]}" -o "$T/metrics_mix" python3 diagnose.py --mode mix) > "$T/metrics_mix.log" 2>&1 || rc=1
  prov metrics_mix "nsys profile ${MFLAGS[*]} -o metrics_mix python3 workloads/diagnose.py --mode mix"
  names+=(metrics_mix)
  fi
  rm -f "$T"/*.nsys-rep
  for n in "${names[@]}"; do stats "$T/$n.sqlite"; done
  ls -la "$T"
  grep -h '\[diagnose\]' "$T"/*.log
  python3 "$HERE/trim.py" --keep-callchains --src "$T" --dest "$T/fixtures" "${names[@]}"
  tar -C "$T" -cf "$OUT/fixtures-$what.tar" fixtures
  ;;
full)
  FFLAGS=(-t cuda,nvtx,osrt -s process-tree --python-sampling=true --python-sampling-frequency=2000
          --cudabacktrace=all:1000 --python-backtrace=cuda --gpu-metrics-devices=0 --gpu-metrics-frequency=10000 -f true)
  (cd "$HERE" && nsys profile "${FFLAGS[@]}" -o "$T/full_diag" python3 diagnose.py --mode full --steps 180 --rounds 3) > "$T/full_diag.log" 2>&1 || rc=1
  nsys export --type sqlite --include-blobs=true -f true -o "$T/full_diag.sqlite" "$T/full_diag.nsys-rep" >> "$T/full_diag.log" 2>&1 || rc=1
  echo "nsys profile ${FFLAGS[*]} -o full_diag python3 workloads/diagnose.py --mode full --steps 180 --rounds 3; nsys export --type sqlite --include-blobs=true -o full_diag.sqlite full_diag.nsys-rep" >> "$T/full_diag.log"
  echo "$GPU / $NSYSV" >> "$T/full_diag.log"
  rm -f "$T/full_diag.nsys-rep"
  ls -la "$T/full_diag.sqlite"
  xz -T0 -6 -c "$T/full_diag.sqlite" | split -b 15M - "$OUT/full_diag.sqlite.xz.part-"
  ;;
launch)
  LFLAGS=(-t cuda,nvtx,osrt -s none --export sqlite -f true)
  (cd "$HERE" && nsys profile "${LFLAGS[@]}" -o "$T/launch_real" python3 launch_bound.py --steps 4000 --kernels 250) > "$T/launch_real.log" 2>&1 || rc=1
  echo "nsys profile ${LFLAGS[*]} -o launch_real python3 workloads/launch_bound.py --steps 4000 --kernels 250" >> "$T/launch_real.log"
  echo "$GPU / $NSYSV" >> "$T/launch_real.log"
  rm -f "$T/launch_real.nsys-rep"
  ls -la "$T/launch_real.sqlite"
  xz -T0 -6 -c "$T/launch_real.sqlite" | split -b 15M - "$OUT/launch_real.sqlite.xz.part-"
  ;;
esac
done
(cd "$T" && tar -cf "$OUT/logs.tar" *.log)
ls -la "$OUT"
exit $rc
