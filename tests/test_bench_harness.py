"""The benchmarks' own harness watches what the package really does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_load_ext_starts_the_thread_the_profile_harness_watches():
    code = textwrap.dedent("""
        import threading
        started = []
        _start = threading.Thread.start
        def start(self):
            started.append(self.name)
            return _start(self)
        threading.Thread.start = start
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "cudamagic")
        import cudamagic
        assert cudamagic.DRIVER_THREAD in started, (cudamagic.DRIVER_THREAD, started)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=REPO)


def test_the_profile_harness_sees_a_running_driver_thread():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import profile_cell
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    import cudamagic

    ns: dict = {}
    exec(profile_cell.PROFILER_SETUP, ns)
    release = threading.Event()
    t = threading.Thread(target=release.wait, name=cudamagic.DRIVER_THREAD, daemon=True)
    t.start()
    try:
        alive, ended = ns["_bench_watch_prewarm"]()
    finally:
        release.set()
        t.join()
    assert alive
