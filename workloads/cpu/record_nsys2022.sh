#!/usr/bin/env bash
# Record the CPU-only fixture with Debian's Nsight Systems 2022.4 (../shared/tools/install-nsys2022.sh):
# it cannot trace CUDA 13 programs, but it records NVTX and OS runtime calls of a host program, which
# gives nsysan a real export of the 2022 schema (EXPORT_META_DATA, schema 3.0.0) made here, with the
# matching `nsys stats` references.
#
#   bash workloads/cpu/record_nsys2022.sh /tmp/rec      # then:
#   python3 workloads/trim.py --src /tmp/rec --dest tests/fixtures/traces cpu_nsys2022
set -euo pipefail
out=${1:?usage: record_nsys2022.sh OUTDIR}
nsys=${NSYS:-nsys2022}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
inc=$(dirname "$(dirname "$(find /opt/nsys2022 -path '*target-linux-x64/nvtx/include/nvtx3/nvToolsExt.h' | head -1)")")
gcc -O1 -I"$inc" "$here/cpu_ladder.c" -o "$out/cpu_ladder" -ldl
cmd="nsys profile -t osrt,nvtx -s none --cpuctxsw=none --export sqlite -o cpu_nsys2022 -f true ./cpu_ladder 3"
(cd "$out" && timeout 300 "$nsys" ${cmd#nsys } > cpu_nsys2022.log 2>&1)
ver=$("$nsys" --version | sed 's/^NVIDIA Nsight Systems version //')
printf '{"nsys_version": "NVIDIA Nsight Systems version %s", "gpu": "none (CPU-only dev machine)", "gpu_memory": "n/a", "driver": "n/a", "command": "%s  (workloads/cpu/record_nsys2022.sh)"}\n' \
  "$ver" "$cmd" > "$out/cpu_nsys2022.json"
mkdir -p "$out/cpu_nsys2022.stats"
work=$(mktemp -d)
cp "$out/cpu_nsys2022.sqlite" "$work/t.sqlite"   # nsys stats may add tables: never run it on the original
"$nsys" stats -q -f csv -r nvtxsum,osrtsum -o "$work/s" "$work/t.sqlite" > /dev/null
# 2022 report names -> the 2023+ names the parity tests read (same columns)
mv "$work/s_nvtxsum.csv" "$out/cpu_nsys2022.stats/nvtx_sum.csv"
mv "$work/s_osrtsum.csv" "$out/cpu_nsys2022.stats/osrt_sum.csv"
rm -rf "$work"
echo "recorded $out/cpu_nsys2022.sqlite"
