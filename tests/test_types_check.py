"""The package type-checks: ``mypy cudamagic`` (configured in pyproject.toml) finds nothing.

The package ships ``py.typed``, so its annotations are a promise to every user's type checker;
one run of mypy over the whole package keeps them true (a minute or so on a cold cache).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_mypy_finds_no_error_in_the_package():
    # its incremental cache (.mypy_cache) makes a second run quick; a crash of mypy's own
    # shows its traceback (the GPU machine's copy lacked mypy 2's ast-serialize: INTERNAL ERROR)
    run = _mypy("--show-traceback", "cudamagic")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout
