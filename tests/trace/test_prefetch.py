"""``prefetch``: the read started before the imports, and the CPUs it takes."""

from __future__ import annotations


def test_the_prefetch_decodes_on_every_cpu_once_taken(fixture_dir, tmp_path, monkeypatch):
    """While the command line imports pandas the prefetch keeps one core free (one thread on 2
    cores); ``take`` is called after the imports, and what is left to decode gets both."""
    from nsysan.trace import prefetch

    monkeypatch.setattr(prefetch, "cpus", lambda: 2)
    path = tmp_path / "g.sqlite"
    path.write_bytes((fixture_dir / "launch_eager.sqlite").read_bytes())
    assert prefetch.start(path)
    with prefetch._lock:
        assert len(prefetch._started[prefetch._key(path, False)].pool._threads) == 1
    got = prefetch.take(path, False)
    assert got is not None and len(got.pool._threads) == 2
    got.close()
