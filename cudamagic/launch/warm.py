"""A warm child for the next tool run of the same kind: started in the background after a run,
already under its tool, its interpreter started and cudamagic's child imported, waiting on its
standard input; the next run writes its files into the child's folder and sends the device,
and the child runs them as a cold one would (:mod:`cudamagic.pipeline.child`).

The isolation is a cold child's: a process of its own, started fresh (never forked from the
notebook, whose CUDA state a fork would copy). It makes its context ahead, under its tool, on
the device of the run that started it (the most of a cold child's time after its imports: a
context under compute-sanitizer); a go for another device makes that one's too. While it waits
it holds that context's device memory (about 0.5 GiB on an H200). One warm
child per kind of run (tool and program, the interpreter, its ``sys.path`` and environment):
one made for other settings is stopped, not used. A warm child whose standard input closes (the
notebook ended, or it was stopped) exits without running anything.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core.process import InChild, InTest, held
from ..toolchain.tools import tools

__all__ = ["WarmChild", "take", "keep", "stop_all", "warm_boot"]

#: the child modules' imports done before the go (the cold child's cost, docs/debugging-design.md)
_PRELOAD = ("cudamagic.pipeline.child", "cudamagic.pipeline.module", "cudamagic.launch.capture",
            "cudamagic.toolchain.device.driver")


def warm_boot(child_module: str) -> str:
    """The warm child's start (``FOLDER OWNER [DEVICE]``): the notebook's sys.path from
    FOLDER/path.json, the child's imports, then the device read from the FOLDER/go FIFO (an
    empty line: exit, nothing run; so too once the process OWNER is gone). A FIFO, not stdin:
    a tool need not hand its target its own stdin."""
    return ("import importlib, json, os, select, sys\n"
            "folder, owner = sys.argv[1], int(sys.argv[2])\n"
            "with open(os.path.join(folder, 'path.json'), encoding='utf-8') as f:\n"
            "    sys.path[:] = json.load(f)\n"
            f"for name in {_PRELOAD!r}:\n"
            "    importlib.import_module(name)\n"
            "if len(sys.argv) > 3:  # the device of the run before: its context made ahead\n"
            "    try:\n"
            "        from cudamagic.toolchain.device import driver\n"
            "        driver.ensure_context(int(sys.argv[3]))\n"
            "    except Exception:  # the run's own context says what is wrong\n"
            "        pass\n"
            "fifo = os.path.join(folder, 'go')\n"
            "fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)\n"
            "keep = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # no EOF while none writes\n"
            "data = b''\n"
            "while b'\\n' not in data:\n"
            "    if select.select([fd], [], [], 1.0)[0]:\n"
            "        data += os.read(fd, 64)\n"
            "        continue\n"
            "    try:\n"
            "        os.kill(owner, 0)\n"
            "    except ProcessLookupError:\n"
            "        sys.exit(0)\n"
            "line = data.split(b'\\n')[0].strip().decode()\n"
            "if not line:\n"
            "    sys.exit(0)\n"
            f"from {child_module} import main\n"
            "sys.exit(main([folder, line]))\n")


@dataclass
class WarmChild:
    """A started child waiting for its run: its folder (the run's files go there), the key of
    the settings it was started with, its process and the process that started it."""

    key: tuple
    folder: Path
    proc: subprocess.Popen
    #: the FIFO held open read-write here, so a go written before the child opened it (still
    #: importing) waits in the pipe for it
    fifo: int
    owner: int = field(default_factory=os.getpid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, line: str) -> None:
        """Write ``line`` to the child's FIFO (read when the child is ready; the FIFO stays
        open here until the child ends, as a pipe with no end open drops what it holds)."""
        os.write(self.fifo, f"{line}\n".encode())

    def go(self, device: int, timeout: float = tools.CHILD_TIMEOUT_S) -> tools.ChildResult:
        """Start the run of the files in :attr:`folder` on ``device`` and wait for its end
        (its time counted from the go)."""
        started = time.perf_counter()
        try:
            self.send(str(device))  # where it ended before, its output says why
            return tools.wait_child(self.proc, timeout, started)
        finally:
            os.close(self.fifo)

    def stop(self) -> None:
        """End it without a run (its group killed: it has launched nothing), its folder removed.
        Only the process that started it stops it (a fork forgets its parent's)."""
        if os.getpid() != self.owner:
            return
        tools.stop_child(self.proc)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        try:
            os.close(self.fifo)
        except OSError:  # closed by its run already
            pass
        shutil.rmtree(self.folder, ignore_errors=True)


def stop_all() -> None:
    """Stop every warm child this process started, and forget them."""
    for child in list(_WARM.values()):
        child.stop()
    _WARM.clear()


_WARM: dict[str, WarmChild] = held(__name__, "_WARM", {}, child=InChild.CLEARED,
                                   test=InTest.CLEARED, clear=stop_all)
atexit.register(stop_all)


def take(kind: str, key: tuple) -> WarmChild | None:
    """The warm child for ``kind`` started with ``key``'s settings, now the caller's (None:
    there is none; one for other settings, or one that ended, is stopped)."""
    child = _WARM.pop(kind, None)
    if child is None:
        return None
    if child.key != key or not child.alive() or os.getpid() != child.owner:
        child.stop()
        return None
    return child


def keep(kind: str, key: tuple, argv_for: Callable[[Path], Sequence[str]],
         env: Mapping[str, str], path: Sequence[str]) -> None:
    """Start a warm child for ``kind`` in the background (``argv_for(folder)``: its command
    line, the tool's around :func:`warm_boot` with ``FOLDER OWNER``: the folder and this
    process's id; ``path``: the sys.path it takes), in place of
    any other kept for it. A child that cannot start is no error: the next run starts cold."""
    old = _WARM.pop(kind, None)
    if old is not None:
        old.stop()
    try:
        folder = tools.scratch_folder()
    except tools.ScratchError:
        return
    import json

    (folder / "path.json").write_text(json.dumps(list(path)), encoding="utf-8")
    fifo = -1
    try:
        os.mkfifo(folder / "go", 0o600)
        fifo = os.open(folder / "go", os.O_RDWR | os.O_NONBLOCK)
        proc = subprocess.Popen(list(argv_for(folder)), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=dict(env), cwd=folder, start_new_session=True)
    except OSError:
        if fifo >= 0:
            os.close(fifo)
        shutil.rmtree(folder, ignore_errors=True)
        return
    _WARM[kind] = WarmChild(key, folder, proc, fifo)


def interpreter_key(env: Mapping[str, str], path: Sequence[str], *extra: object) -> tuple:
    """What a warm child's run must share with the run it is taken for."""
    return (sys.executable, tuple(path), tuple(sorted(env.items())), *extra)
