#!/bin/sh
# The peer side of the side-by-side benchmark: Debian's Nsight Systems 2022.4
# (../shared/tools/install-nsys2022.sh) running `nsys stats` with the eight reports the issue names
# (kernel, CUDA API, NVTX, memcpy by time and by size, kernel launch/exec, NVTX-kernel, OS runtime;
# their 2022.4 names from `nsys stats --help-reports`) and then `nsys analyze` (its default rules),
# as one command. Runs on a copy, so the trace is never touched.
#   benchmarks/peer_nsys2022.sh TRACE.sqlite     # benchmarks/peers.py pairs TRACE --vs nsys2022 times it
set -eu
NSYS=${NSYS:-nsys2022}
REPORTS=gpukernsum,cudaapisum,nvtxsum,gpumemtimesum,gpumemsizesum,kernexecsum,nvtxkernsum,osrtsum
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$1" "$tmp/t.sqlite"
"$NSYS" stats -q -r "$REPORTS" -f csv -o "$tmp/r" "$tmp/t.sqlite" >/dev/null
"$NSYS" analyze -q "$tmp/t.sqlite" >/dev/null 2>&1 || "$NSYS" analyze "$tmp/t.sqlite" >/dev/null
