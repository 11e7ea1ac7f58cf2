"""The floor under a whole ``nsysan analyze`` run: everything the command does up to the loaded
trace (its start-up, the imports, the report's libraries, the prefetch and ``open_trace``), then an
immediate exit. Timed as a whole process beside the real command, it says how much of a run no
analysis, rule or output could win back (docs/performance.md, sixth session of speed round 4):

    farm-bench -n 6 --vs "python3 -m nsysan analyze T.sqlite --json a.json --html a.html -f -q" -- \\
        python3 benchmarks/load_floor.py analyze T.sqlite --json a.json --html a.html -f -q

It takes the command's own arguments (so the same outputs are checked and the same libraries
loaded), writes nothing, and prints the seconds to the loaded trace on stderr.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

T0 = time.perf_counter()


def main() -> None:
    from nsysan import _startup

    _startup.own_process()
    import nsysan.pipeline as pipeline
    from nsysan.cli import main as cli_main

    def stop_after_load(source: Any, *args: Any, **kwargs: Any) -> None:
        from nsysan.trace import open_trace

        open_trace(source)
        sys.stderr.write(f"loaded after {time.perf_counter() - T0:.3f} s\n")
        sys.stderr.flush()
        os._exit(0)

    pipeline._analyze_and_write = stop_after_load  # type: ignore[assignment]
    sys.exit(cli_main(sys.argv[1:]))


if __name__ == "__main__":
    main()
