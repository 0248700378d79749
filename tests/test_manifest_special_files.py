"""A stored manifest (a team member's remote record, a folder's entry) may name any path: the
hit's check must never block on a FIFO, read /dev/zero or a file far larger than the header
it recorded, and answers a miss for each. Each case runs in a child process with a 1 GiB
address-space limit and a timeout, so the old code fails instead of taking the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_CHILD = textwrap.dedent("""
    import hashlib, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from cudamagic.toolchain.manifest import HeaderState, Manifest, SearchPath
    path, size = sys.argv[1], int(sys.argv[2])
    state = HeaderState(path, size, 0, hashlib.sha256(b"#pragma once\\n").hexdigest())
    t = time.perf_counter()
    miss = Manifest([state], search=SearchPath("/", ())).check()
    print(type(miss).__name__, round(time.perf_counter() - t, 3), miss and miss.detail)
""")


def _fifo(tmp: Path) -> str:
    os.mkfifo(tmp / "fifo.h")
    return str(tmp / "fifo.h")


def _sparse(tmp: Path) -> str:  # 4 GiB of holes, recorded as a 13-byte header
    with open(tmp / "big.h", "wb") as f:
        f.truncate(4 << 30)
    return str(tmp / "big.h")


def _sparse_same_size(tmp: Path) -> str:  # recorded at its own (large) size: hashed in pieces
    with open(tmp / "big.h", "wb") as f:
        f.truncate(1152 << 20)
    return str(tmp / "big.h")


CASES = [
    ("a FIFO", _fifo, 13),
    ("/dev/zero", lambda tmp: "/dev/zero", 13),
    ("/dev/zero at size 0", lambda tmp: "/dev/zero", 0),
    ("a directory", lambda tmp: str(tmp), 13),
    ("a 4 GiB file recorded as 13 bytes", _sparse, 13),
    ("a 1.1 GiB file at its size", _sparse_same_size, 1152 << 20),
]


@pytest.mark.parametrize("name, make, size", CASES, ids=[c[0] for c in CASES])
def test_a_manifest_naming_a_special_or_huge_file_is_a_quick_miss(tmp_path, name, make, size):
    path = make(tmp_path)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, path, str(size)], env=env,
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name}: the check still runs after 30 s")
    assert done.returncode == 0, done.stderr[-2000:]
    kind, seconds, reason = done.stdout.split(" ", 2)
    assert kind == "Miss", done.stdout
    assert "changed" in reason
