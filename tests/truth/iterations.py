"""Write the "SQL-derived truth" section of fixture READMEs, computed by ``tests/sqltruth.py``.

For each named fixture (``tests/fixtures/traces/<name>/``) this computes, with plain SQL on the
trimmed export, the iteration range's instances, period p50, latency p50, device busy time and
(pid, stream) pairs, and replaces (or appends) the README's ``## SQL-derived truth`` section.

    python3 -m tests.truth.iterations decode_eager decode_graph ...      # the ITERATION table's names
    python3 -m tests.truth.iterations --print two_procs                  # print, don't write
"""

from __future__ import annotations

import argparse
import sys

from tests import sqltruth as T

# fixture: (iteration range, secondary ranges whose truth is listed too)
ITERATION = {
    "decode_eager": ("request", ["decode_token"]),
    "decode_graph": ("request", ["decode_token"]),
    "decode_graph_nodes": ("request", ["decode_token"]),
    "hf_generate": ("request", []),
    "train_inline": ("train_step", ["data"]),
    "train_dataloader": ("train_step", ["data"]),
    "two_procs": ("train_step", ["ncclAllReduce"]),
    **{n: ("train_step", ["load_batch"]) for n in (
        "ddp_overlap", "ddp_serial", "ddp_straggler", "tp", "fsdp", "pipeline", "ddp_overlap_rank0",
        "ddp_overlap_rank1", "ddp_straggler_rank0", "ddp_straggler_rank1", "ddp_serial_c4", "ddp_overlap_c4",
        "ddp_serial_w4096_l4_b4096", "ddp_overlap_w4096_l4_b4096")},
    **{n: ("train_step", ["micro_batch", "optimizer"]) for n in (
        "grad_accum", "grad_accum_straggler", "grad_accum_straggler15")},
    "threads_loops": ("worker_step", []),
    "serve_loop": ("request", ["token", "forward", "prepare", "schedule"]),
    "nested_steps": ("train_step", []),
}
HEADER = "## SQL-derived truth"


def ns(v: float | None) -> str:
    if v is None:
        return "none"
    return f"{v} ns ({v / 1e6:.3f} ms)"


def range_lines(conn, name: str) -> list[str]:
    inst = T.range_instances(conn, name)
    seqs: dict[str, int] = {}
    for r in inst:
        seqs[f"{r['pid']}/{r['tid']}"] = seqs.get(f"{r['pid']}/{r['tid']}", 0) + 1
    ops = sorted({r["ops"] for r in inst})
    return [
        f"- `{name}`: {len(inst)} closed push/pop instances; per pid/tid: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(seqs.items())),
        f"  - GPU ops launched inside an instance (on its thread): {ops[0]}..{ops[-1]}" if ops else "  - no ops",
        f"  - period p50 (consecutive completions, per pid/tid, pooled): {ns(T.iteration_period_p50(conn, name))}",
        f"  - latency p50 (completion - start): {ns(T.latency_p50(conn, name))}",
    ]


def section(name: str) -> str:
    rng, secondary = ITERATION[name]
    conn = T.open_fixture(name)
    s = T.summary(conn, rng)
    pairs = s["stream_pairs"]
    lines = [
        HEADER,
        "",
        ("Computed by `tests/sqltruth.py` (plain SQL on the trimmed export; `python3 -m tests.truth.iterations "
        f"{name}` rewrites this section). Times are int64 ns from the export's clock. An instance's ops are the GPU "
        "ops (kernel, memcpy, memset, graph-trace rows) whose launching CUDA API call started on its thread inside "
        "it; completion = max(CPU end, last such op's end)."),
        "",
        f"Iteration range: `{rng}`",
        "",
        *range_lines(conn, rng),
        f"  - CPU duration p50: {ns(s['cpu_p50_ns'])}",
        f"  - iterations window (first start, last completion): {s['iterations_window']}",
    ]
    for sec in secondary:
        lines += range_lines(conn, sec)
    lines += [
        "",
        "Device:",
        "",
        *[f"- device {d} busy (union of all GPU ops, all processes, whole trace): {ns(v)}"
          for d, v in s["device_busy_ns"].items()],
        *[f"- device {d} busy inside the iterations window: {ns(v)}"
          for d, v in s["device_busy_in_iterations_ns"].items()],
        f"- distinct (pid, streamId) pairs with GPU ops: {len(pairs)}: {', '.join(f'({p}, {q})' for p, q in pairs)}",
        "- GPU op rows: " + ", ".join(f"{t.replace('CUPTI_ACTIVITY_KIND_', '')} {n}"
                                      for t, n in s["gpu_op_counts"].items()),
        f"- event window (GPU ops, CUDA API, closed NVTX, OS runtime): {s['event_window']}",
        "",
    ]
    conn.close()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help=f"fixtures (default: {', '.join(ITERATION)})")
    p.add_argument("--print", action="store_true", help="print the sections instead of writing the READMEs")
    args = p.parse_args(argv)
    for name in args.names or list(ITERATION):
        text = section(name)
        if args.print:
            print(text)
            continue
        readme = T.FIXTURES / name / "README.md"
        old = readme.read_text() if readme.exists() else f"# {name}\n"
        head = old.split(HEADER)[0].rstrip("\n")
        readme.write_text(head + "\n\n" + text)
        print(f"{readme}: truth written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
