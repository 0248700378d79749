"""NVRTC's time trace never leaks: no compile writes outside its private folder or aborts.

NVRTC keeps its trace state per thread and clears it only when a traced compile succeeds; a
failed traced compile left the state set, and the thread's next successful compile, traced or
not, wrote ``.json`` into the process's current folder, or aborted the process (SIGABRT, a dead
Jupyter kernel) where that folder could not be written. ``/proc`` is such a folder even for
root. Each child here runs from it; under strace (where it can run) every file the child
creates, opens for writing or renames is listed, and each must lie in the cache folder or in a
trace folder of the package's.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cudamagic.toolchain.compile.tracefolder import PREFIX

from .conftest import REPO

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"),
                                reason="needs /proc as a folder no process can write in")

READ_ONLY = "/proc"
_WRITES = re.compile(r'^\d+\s+(?P<call>openat|open|creat|mkdir|mkdirat|rename|renameat2?|link'
                     r'|linkat|symlink|symlinkat)\((?:AT_FDCWD, )?"(?P<path>[^"]*)"'
                     r'(?P<rest>.*)= (?P<ret>-?\d+)')


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    probe = subprocess.run(["strace", "-f", "-qq", "-e", "trace=none", "true"],
                           capture_output=True, timeout=60)
    return probe.returncode == 0


STRACE = _strace_works()


_UNLINKED = re.compile(r'^(?P<pid>\d+)\s+unlink(?:at)?\((?:AT_FDCWD, )?"(?P<path>[^"]*)".*= 0')


#: the front end's anonymous temporary file: edg.XXXXXX (NVRTC 13.5), edg0_PID (13.0)
_EDG_TEMP = re.compile(r"edg(\.|\d+_\d+$)")


def _written(log: Path) -> list[str]:
    """The paths a strace log shows created, opened for writing, renamed or linked; an
    anonymous file excepted, which NVRTC's front end makes while it writes a precompiled
    header or, in NVRTC 13.0, compiles (``TMPDIR/edg.XXXXXX`` in 13.5, ``TMPDIR/edg0_PID`` in
    13.0: created and unlinked at once, as tmpfile() makes one)."""
    out = []
    lines = log.read_text(errors="replace").splitlines()
    unlinked = {(m.group("pid"), m.group("path")) for m in map(_UNLINKED.match, lines) if m}
    for line in lines:
        m = _WRITES.match(line)
        if m and _EDG_TEMP.match(os.path.basename(m.group("path"))) \
                and (line.split()[0], m.group("path")) in unlinked:
            continue
        if not m or int(m.group("ret")) < 0:
            continue
        if m.group("call") in ("openat", "open") and not re.search(
                r"O_WRONLY|O_RDWR|O_CREAT|O_APPEND|O_TRUNC", m.group("rest")):
            continue
        out.append(m.group("path"))
    return out


def _run_child(code: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``code`` in a fresh interpreter whose current folder is /proc; its result and, under
    strace, every path it wrote that is not its cache's or a trace folder of the package's."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(tmpdir),
        "CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache"), "HOME": str(tmp_path / "home")}
    log = tmp_path / "strace.log"
    cmd = [sys.executable, "-c", code]
    if STRACE:
        cmd = ["strace", "-f", "-qq", "-o", str(log), "-e",
               "trace=open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,"
               "unlink,unlinkat,"
               "symlink,symlinkat", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=READ_ONLY,
                          timeout=600)
    allowed = (str(tmp_path / "cache"), f"/dev/shm/{PREFIX}", str(tmpdir / PREFIX), "/dev/null",
               "/dev/tty")
    stray = [p for p in (_written(log) if STRACE else []) if not p.startswith(allowed)]
    left = [p.name for p in tmpdir.iterdir()]  # a trace folder left behind, or a stray file
    return proc, stray + [f"{tmpdir}/{n}" for n in left]


def _assert_clean(proc: subprocess.CompletedProcess, stray: list[str]) -> None:
    assert proc.returncode == 0, f"child died ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert "time profiler" not in proc.stderr, proc.stderr
    assert not stray, f"written outside the cache and the trace folders: {stray}"
    assert not list(REPO.glob("*.json")), "a trace was written into the repository"


def test_a_failed_traced_build_then_an_include_free_build_from_proc(tmp_path):
    """The issue's reproduction: a traced cell with a typo, then a cell with no include (which
    compiles without the trace), each a build() from a folder nobody can write in."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "v.h").write_text("#define V 1\n")
    code = f"""
import cudamagic
from cudamagic.errors import CompileError
try:
    cudamagic.build('#include <v.h>\\n__global__ void k(int* x) {{ x[0] = V }}\\n',
                    options=['-I{tmp_path / "inc"}'])
except CompileError:
    print("typo refused")
m = cudamagic.build('extern "C" __global__ void k(int* x) {{ x[0] = 2; }}\\n')
print("built", m.cubin[:4] == b"\\x7fELF")
"""
    proc, stray = _run_child(code, tmp_path)
    _assert_clean(proc, stray)
    assert proc.stdout.split("\n")[:2] == ["typo refused", "built True"]


# one compile of each kind: (traced?, source, name expressions, options, expected outcome)
INC = "#include <v.h>\n"
KINDS = {
    "traced ok": (True, INC + "template <int N> __global__ void k(int* x) { x[0] = V + N; }\n",
                  ["k<1>"], [], "ok"),
    "traced typo": (True, INC + "__global__ void k(int* x) { x[0] = V }\n", [], [],
                    "CompileError"),
    "traced bad -n": (True, INC + "template <int N> __global__ void k(int* x) {}\n",
                      ["k<float>"], [], "CompileError"),
    "traced bad option": (True, INC + "__global__ void k() {}\n", [], ["-bogus"],
                          "OptionError"),
    "untraced ok": (False, '__global__ void k(int* x) { x[0] = 3; }\n', [], [], "ok"),
    "untraced typo": (False, "__global__ void k(int* x) { x[0] = 3 }\n", [], [],
                      "CompileError"),
}
# every ordered pair, so each kind follows each (a leak shows in the compile after the one
# that left it); then every kind after a raw NVRTC failure on the caller's own thread (another
# library's compile that left the state set)
BATCH = [k for pair in itertools.product(KINDS, repeat=2) for k in pair]

BATCH_CHILD = r"""
import json, sys, threading
from cudamagic.toolchain.compile.nvrtc import compile_cubin
from cudamagic.errors import CudaMagicError
kinds, batch, inc, threads = json.loads(sys.argv[1])

def one(label):
    traced, src, names, opts, _ = kinds[label]
    try:
        r = compile_cubin(src, names, ["-arch=sm_90", "-I" + inc, *opts], trace=traced)
    except CudaMagicError as exc:
        return type(exc).__name__
    assert r.cubin[:4] == b"\x7fELF"
    assert (r.trace is not None) is traced, label
    return "ok"

def foreign_failure():
    from cuda.bindings import nvrtc
    _, prog = nvrtc.nvrtcCreateProgram(b"int x = ;", b"other.cu", 0, [], [])
    nvrtc.nvrtcCompileProgram(prog, 2, [b"-arch=sm_90", b"--fdevice-time-trace=/proc/x/other"])
    nvrtc.nvrtcDestroyProgram(prog)

out = {}
def run(part, name):
    got = []
    for label in part:
        got.append([label, one(label)])
    out[name] = got
if threads == 1:
    run(batch, "main")
    for label in kinds:
        foreign_failure()
        out.setdefault("after foreign", []).append([label, one(label)])
else:
    ts = [threading.Thread(target=run, args=(batch[i::threads], i)) for i in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
print(json.dumps(out))
"""


@pytest.mark.parametrize("threads", [1, 4])
def test_every_order_of_traced_untraced_and_failing_compiles_from_proc(tmp_path, threads):
    """Every kind of compile after every other, on one thread and spread over four, from a
    folder nobody can write in: each gives its own outcome, none aborts or writes a stray
    file; and after another library's traced compile failed on the calling thread, every kind
    still does."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "v.h").write_text("#define V 1\n")
    arg = json.dumps([KINDS, BATCH, str(tmp_path / "inc"), threads])
    code = BATCH_CHILD.replace("json.loads(sys.argv[1])", f"json.loads({arg!r})")
    proc, stray = _run_child(code, tmp_path)
    _assert_clean(proc, stray)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    got = [pair for part in out.values() for pair in part]
    assert len(got) == len(BATCH) + (len(KINDS) if threads == 1 else 0)
    wrong = [(label, outcome) for label, outcome in got if outcome != KINDS[label][4]]
    assert not wrong, wrong


def test_ctrl_c_during_a_compile_is_raised_once_nvrtc_has_returned(tmp_path):
    """The compile's own thread cannot be stopped inside NVRTC: Ctrl-C while the caller waits
    is raised after the compile ended, never leaving NVRTC running behind the caller. The
    Ctrl-C comes while NVRTC waits to open a header the test holds (tests/held_open.py), and
    the header is let go 0.3 s later, whatever the machine's speed or load (a timer racing the
    compile came too late on a fast machine: 'not interrupted')."""
    from .conftest import run_python

    out = run_python(
        "import os, signal, sys, threading, time\n"
        "from cudamagic.toolchain.compile.nvrtc import compile_cubin\n"
        "from tests.held_open import HeldOpen, LeaseUnavailable\n"
        f"folder = {str(tmp_path)!r}\n"
        "try:\n"
        "    held = HeldOpen(os.path.join(folder, 'held.h'))\n"
        "except LeaseUnavailable as exc:\n"
        "    print('skip:', exc)\n"
        "    sys.exit(0)\n"
        "let_go = []\n"
        "def interrupt():\n"
        "    if held.opened(60):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(0.3)\n"
        "        let_go.append(time.perf_counter())\n"
        "    held.let_go()\n"
        "threading.Thread(target=interrupt, daemon=True).start()\n"
        "try:\n"
        "    compile_cubin('#include \"held.h\"\\n__global__ void k() {}\\n', [],\n"
        "                  ['-arch=sm_90', '-I' + folder])\n"
        "    print('not interrupted')\n"
        "except KeyboardInterrupt:\n"
        "    raised = time.perf_counter()\n"
        "    alive = [w.name for w in threading.enumerate() if w.name == 'cudamagic-nvrtc']\n"
        "    print('interrupted', alive, bool(let_go) and raised >= let_go[0])\n"
        "held.release()\n", timeout=120)
    if out.startswith("skip:"):
        pytest.skip(f"the compile is held with a file lease: {out}")
    assert out.split("\n")[0] == "interrupted [] True", out


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _popen_python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# a process whose traced compile waits, its trace folder made, until a file appears
_HELD_COMPILE = """
import os, sys, time
from cudamagic.toolchain.compile import nvrtc
real = nvrtc._compile
def held(*args):
    print("ready", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.01)
    return real(*args)
nvrtc._compile = held
# (the word "include" last: no code past it to leave out, so the compile itself is traced
# rather than listed in a child: toolchain/compile/listing.py)
r = nvrtc.compile_cubin('__global__ void k() {}\\n// include\\n', [], ['-arch=sm_90'])
print("traced", r.trace is not None, flush=True)
"""
_FIRST_COMPILE = ("from cudamagic.toolchain.compile.nvrtc import compile_cubin\n"
                  "assert compile_cubin('__global__ void j() {}', [], ['-arch=sm_90']).trace\n")


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="needs a writable /dev/shm")
@pytest.mark.parametrize("namespace", ["the same pid namespace", "another pid namespace"])
def test_a_neighbours_first_compile_leaves_a_live_compiles_trace_folder(tmp_path, namespace):
    """A process whose trace folder is in use keeps it while another process's first traced
    compile reaps the folders of the dead, also from another pid namespace sharing /dev/shm
    (containers sharing an IPC namespace), where none of this process's pids can be seen: the
    pid-based reaper removed the live folder and the compiling process aborted."""
    if namespace == "another pid namespace" and not _unshare_works():
        pytest.skip("unshare --pid --fork cannot run here (needs root or user namespaces)")
    go = tmp_path / "go"
    holder = _popen_python(_HELD_COMPILE, str(go))
    try:
        assert holder.stdout.readline().strip() == "ready"
        prefix = ["unshare", "--pid", "--fork"] if namespace == "another pid namespace" else []
        neighbour = subprocess.run([*prefix, sys.executable, "-c", _FIRST_COMPILE],
                                   capture_output=True, text=True, timeout=120, env=_env())
        assert neighbour.returncode == 0, neighbour.stderr
        go.touch()
        out, err = holder.communicate(timeout=120)
    finally:
        go.touch()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode == 0, f"the compiling process died ({holder.returncode}): {err}"
    assert out.strip() == "traced True", (out, err)


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="needs a writable /dev/shm")
def test_trace_folders_of_processes_killed_mid_compile_are_removed(tmp_path):
    """A process killed during a compile (kill -9) cannot remove its trace folder; the next
    process's first traced compile removes it (its lock went with the process)."""
    go = tmp_path / "go"
    killed = _popen_python(_HELD_COMPILE, str(go))
    before = set(os.listdir("/dev/shm"))
    try:
        assert killed.stdout.readline().strip() == "ready"
        left = {n for n in os.listdir("/dev/shm") if n.startswith("cudamagic-traces-")} - before
        assert len(left) == 1, left
    finally:
        killed.kill()
        killed.wait()
    from .conftest import run_python

    run_python(_FIRST_COMPILE)
    assert not os.path.exists(os.path.join("/dev/shm", left.pop()))


# --- an option NVRTC refuses: told apart by its error's type and fields, not its words --------

from cudamagic.core.options import options_from_args  # noqa: E402

_KERNEL = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'


def test_an_option_nvrtc_refuses_is_an_option_error_holding_the_options():
    from cudamagic.errors import OptionError
    from cudamagic.toolchain.compile import nvrtc

    options = ["-arch=sm_90", "--no-such-option"]
    with pytest.raises(OptionError, match="NVRTC refused an option") as raised:
        nvrtc._traced_compile(_KERNEL, [], options, "cell.cu", 0, False)
    assert raised.value.refused == tuple(options)
    with pytest.raises(OptionError) as line:
        options_from_args(["-arch=sm_1"])
    assert line.value.refused is None  # cudamagic's own refusal


@pytest.mark.parametrize("refused", ["the trace option", "another option"])
def test_a_refused_trace_option_compiles_untraced_whatever_the_words(refused, monkeypatch):
    """An NVRTC older than --fdevice-time-trace refuses it: the compile runs without it. The
    decision reads the error's options; the message here is reworded and nothing changes."""
    from cudamagic.errors import OptionError
    from cudamagic.toolchain.compile import nvrtc

    real = nvrtc._compile

    def old_nvrtc(source, names, options, *rest):
        if any(o.startswith("--fdevice-time-trace") for o in options):
            told = options if refused == "the trace option" else options[:1]
            raise OptionError("reworded: no", refused=tuple(told))
        return real(source, names, options, *rest)

    monkeypatch.setattr(nvrtc, "_compile", old_nvrtc)
    if refused == "another option":
        with pytest.raises(OptionError, match="reworded"):
            nvrtc._traced_compile(_KERNEL, [], ["-arch=sm_90"], "cell.cu", 0, True)
        return
    (cubin, *_), trace = nvrtc._traced_compile(_KERNEL, [], ["-arch=sm_90"], "cell.cu", 0, True)
    assert cubin[:4] == b"\x7fELF" and trace is None
