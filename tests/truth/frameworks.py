"""The "SQL-derived truth" README sections of the framework fixtures (``jax_train``, ``compile_train``).

The same computation as ``iterations.py`` (``tests/sqltruth.py``, plain SQL on the trimmed export),
with these fixtures' iteration ranges, which its ITERATION table does not list. For ``jax_train`` the
truth of XLA's own ranges of the step (the executable's ``XlaModule`` range, one command buffer
thunk that runs once per layer and step) is listed beside ``train_step``.

    python3 -m tests.truth.frameworks            # both
    python3 -m tests.truth.frameworks --print jax_train
"""

from __future__ import annotations

import sys

from tests.truth import iterations as F

FRAMEWORKS = {
    "jax_train": ("train_step", ["warmup", "XlaModule:#hlo_module=jit_step,program_id=20522#",
                                 "Thunk:#hlo_op=command_buffer_23#"]),
    "compile_train": ("train_step", []),
}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    names = [a for a in args if not a.startswith("-")] or list(FRAMEWORKS)
    flags = [a for a in args if a.startswith("-")]
    F.ITERATION.update(FRAMEWORKS)
    rc = F.main([*flags, *names])
    if "--print" not in flags:
        for name in names:
            readme = F.T.FIXTURES / name / "README.md"
            readme.write_text(readme.read_text().replace(
                f"`python3 -m tests.truth.iterations {name}`", f"`python3 -m tests.truth.frameworks {name}`"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
