"""The CUDA toolkit a build sees: header folders every build gets, and what identifies them.

Found without importing anything heavy (``cupy``'s import takes seconds): the package folders
come from ``importlib.util.find_spec``, the versions from the names of the installed
distributions' ``.dist-info`` folders, read in one listing per site-packages folder. Cheap on
purpose: it runs on the first build of every process, cache hits included.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .process import cached

__all__ = ["Toolkit", "toolkit", "include_hints", "known_to_fail", "KNOWN_TO_FAIL", "std_header_dirs", "std_headers_shipped",
           "loaded_libraries", "install_command", "package_dir", "search_folders",
           "travelling_name"]

# distributions that ship the headers every build sees (crt/mma.h: nvidia_cuda_crt;
# curand_kernel.h: nvidia_curand), the NVRTC that compiles, or the nvJitLink that links
_DISTS = ("cupy", "nvidia_cuda_runtime", "nvidia_cuda_nvrtc", "nvidia_cuda_cccl",
          "nvidia_cuda_crt", "nvidia_curand", "nvidia_nvjitlink")
_HOME_VARS = ("CUDA_HOME", "CUDA_PATH")


@dataclass(frozen=True)
class Toolkit:
    """Header folders and the identity of the packages that ship them.

    Attributes
    ----------
    include_dirs : tuple of str
        Folders every build searches after the user's ``-I``: CuPy's (``<cupy/complex.cuh>``
        and CCCL: ``<cuda/std/...>``, ``<cub/...>``, ``<thrust/...>``), then one toolkit folder
        with ``cuda_fp16.h`` (``$CUDA_HOME/include`` or the ``nvidia-cuda-runtime`` wheel's).
    distributions : tuple of str
        ``.dist-info`` names of the packages above and of NVRTC's wheel
        (``cupy_cuda13x-14.2.0.dist-info``...): a new version of any is a new toolkit.
    cuda_homes : tuple of str
        ``VAR:sha256-prefix`` of ``$CUDA_HOME/version.json`` (and ``$CUDA_PATH``'s).
    names : tuple of str
        For each of ``include_dirs``, the name that travels: its path inside the folder its
        package is installed in (``site-packages/cupy/_core/include``), ``$CUDA_HOME/include``,
        or the absolute folder where it is neither. The same packages in another venv or on
        another machine give the same names.
    """

    include_dirs: tuple[str, ...]
    distributions: tuple[str, ...]
    cuda_homes: tuple[str, ...]
    names: tuple[str, ...] = ()

    @property
    def nvrtc_wheel(self) -> str | None:
        """The ``nvidia-cuda-nvrtc`` wheel's dist-info name (NVRTC is loaded from it), if any."""
        return next((d for d in self.distributions if d.startswith("nvidia_cuda_nvrtc")), None)

    @property
    def fingerprint(self) -> str:
        """One string for the cache key: the packages' versions and the folders' names, not
        where they are installed (two venvs of the same versions share entries)."""
        return ";".join((*self.distributions, *self.cuda_homes, *self.names))

    @property
    def named(self) -> tuple[tuple[str, str], ...]:
        """``(folder, name)`` of each folder whose name is not its absolute path."""
        return tuple((d, n) for d, n in zip(self.include_dirs, self.names) if d != n)


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # finds without importing
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _include_dirs(cupy: Path | None, nvidia: Path | None,
                  homes: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    dirs: list[Path] = []
    if cupy:
        inc = cupy / "_core" / "include"
        cccl = inc / "cupy" / "_cccl"
        dirs += [inc, cccl / "libcudacxx", cccl / "cub", cccl / "thrust"]
    dirs = [d for d in dirs if d.is_dir()]
    # one toolkit header folder: the first that has cuda_fp16.h (two would shadow each other)
    toolkits = [Path(home) / "include" for _, home in homes]
    if nvidia:
        toolkits += sorted(nvidia.glob("cu*/include"), reverse=True)
    toolkits.append(Path("/usr/local/cuda/include"))
    dirs += [d for d in toolkits if (d / "cuda_fp16.h").is_file()][:1]
    return tuple(dict.fromkeys(str(d) for d in dirs))


def toolkit() -> Toolkit:
    """The toolkit of this process: looked up once, and again where what names it changed
    since: ``$CUDA_HOME``, ``$CUDA_PATH`` (relative ones from the working folder), the folders
    of ``sys.path`` and their modification times (``%pip install`` into one changes it). A
    notebook that changes them after ``%load_ext``, whose warm-up looked it up, gets the
    toolkit they name."""
    homes = tuple((v, os.path.abspath(os.environ[v])) for v in _HOME_VARS if os.environ.get(v))
    return _toolkit_for(homes, search_folders())


def search_folders() -> tuple[tuple[str, int | None], ...]:
    """``sys.path`` as absolute folders (``""`` and relative entries from the working folder),
    each with its modification time (None: none there); entries that are no text are left
    out, as the import system skips them."""
    out: list[tuple[str, int | None]] = []
    for entry in sys.path:
        if not isinstance(entry, str):
            continue
        try:
            folder = os.path.abspath(entry or os.curdir)
            out.append((folder, os.stat(folder).st_mtime_ns))
        except (OSError, ValueError):  # gone, or a name with a NUL
            out.append((entry, None))
    return tuple(out)


@cached(1)
def _toolkit_for(homes: tuple[tuple[str, str], ...],
                 folders: tuple[tuple[str, int | None], ...]) -> Toolkit:
    """:func:`toolkit` for these toolkit folders (``(variable, absolute folder)``) and this
    state of ``sys.path``'s folders (the key; the packages are found by the import system)."""
    cupy, nvidia = package_dir("cupy"), package_dir("nvidia")
    dists: list[str] = []
    for site in sorted({d.parent for d in (cupy, nvidia) if d is not None}):
        try:
            dists += sorted(n for n in os.listdir(site)
                            if n.endswith(".dist-info") and n.startswith(_DISTS))
        except OSError:
            continue
    named = []
    for var, home in homes:
        version = Path(home, "version.json")
        if version.is_file():
            named.append(f"{var}:" + hashlib.sha256(version.read_bytes()).hexdigest()[:16])
    dirs = _include_dirs(cupy, nvidia, homes)
    sites = [str(d.parent) for d in (cupy, nvidia) if d is not None]
    # a version is a version in whichever folder it is installed (a venv over another's)
    return Toolkit(dirs, tuple(sorted(set(dists))), tuple(named),
                   tuple(travelling_name(d, sites, homes) for d in dirs))


def travelling_name(folder: str, sites: list[str], homes: tuple[tuple[str, str], ...]) -> str:
    """The name of a toolkit folder that travels (see :attr:`Toolkit.names`)."""
    for label, base in [*(("site-packages", s) for s in sites),
                        *((f"${var}", home) for var, home in homes)]:
        base = base.rstrip("/")
        if folder.startswith(base + "/"):
            return f"{label}/{folder[len(base) + 1:]}"
    return folder


# headers that some wheel of the CUDA stack ships, and the wheel (NVRTC says only that it cannot
# open them)
_WHEEL_HEADERS = {"curand_kernel.h": "nvidia-curand", "curand.h": "nvidia-curand",
                  "crt/mma.h": "nvidia-cuda-crt", "crt/mma.hpp": "nvidia-cuda-crt",
                  "cuda_fp16.h": "nvidia-cuda-runtime", "cuda_bf16.h": "nvidia-cuda-runtime",
                  "cuda_fp8.h": "nvidia-cuda-runtime", "cooperative_groups.h":
                  "nvidia-cuda-runtime"}
_CANNOT_OPEN = re.compile(r'cannot open source file "([^"]+)"')
# headers cudamagic knows NVRTC cannot compile (their device-wide part is host code), and what
# does compile: said before a compile that would fail after seconds (known_to_fail), where the
# toolkit's copy is the one a cell's own include reads; tests/test_headers.py compiles each
# with the real NVRTC to prove that it fails
KNOWN_TO_FAIL = _HOST_ONLY = {
    "cub/cub.cuh": "<cub/cub.cuh> also brings in CUB's device-wide algorithms "
                   "(cub::DeviceReduce...), which are host code NVRTC cannot compile; the block- "
                   "and warp-level headers work in a kernel: <cub/block/block_reduce.cuh>, "
                   "<cub/block/block_scan.cuh>, <cub/block/block_load.cuh>, "
                   "<cub/warp/warp_reduce.cuh>...",
}
# without cudamagic's standard headers (--no-std-headers): what they made compile
_NEEDS_STD_HEADERS = {
    "thrust/complex.h": "thrust's <thrust/complex.h> needs <math.h> and host stream operators, "
                        "which cudamagic's standard headers provide (they are turned off: "
                        "leave out --no-std-headers / std_headers=False); or include "
                        "<cupy/complex.cuh> (thrust::complex<T> made for NVRTC) or "
                        "<cuda/std/complex> (cuda::std::complex<T>)",
}
# the C and C++ standard library's headers (what NVRTC cannot open is one of these, or the user's)
_STANDARD = frozenset("""
algorithm any array atomic barrier bit bitset cassert ccomplex cctype cerrno cfenv cfloat
charconv chrono cinttypes ciso646 climits clocale cmath codecvt compare complex concepts
condition_variable coroutine csetjmp csignal cstdarg cstdbool cstddef cstdint cstdio cstdlib
cstring ctgmath ctime cuchar cwchar cwctype deque exception execution expected filesystem
format forward_list fstream functional future initializer_list iomanip ios iosfwd iostream
istream iterator latch limits list locale map mdspan memory memory_resource mutex new numbers
numeric optional ostream print queue random ranges ratio regex scoped_allocator semaphore set
shared_mutex source_location span sstream stack stdexcept stop_token streambuf string
string_view syncstream system_error thread tuple type_traits typeindex typeinfo unordered_map
unordered_set utility valarray variant vector version assert.h complex.h ctype.h errno.h
fenv.h float.h inttypes.h iso646.h limits.h locale.h math.h setjmp.h signal.h stdalign.h
stdarg.h stdbool.h stddef.h stdint.h stdio.h stdlib.h string.h tgmath.h time.h uchar.h
wchar.h wctype.h""".split())
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.M)


_HEADERS = Path(__file__).resolve().parent.parent / "headers"


def std_header_dirs() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """cudamagic's header folders: (searched before the toolkit's, searched after all).

    ``headers/std`` maps the C++ standard headers device code includes onto libcu++ (NVRTC has
    no standard library); last, so that a project's own ``<cstdint>`` wins. ``headers/nvrtc``
    holds the one CCCL header NVRTC cannot compile (thrust's stream operators of
    ``thrust::complex``: host functions), emptied; it must come before CCCL's folders.
    """
    return (str(_HEADERS / "nvrtc"),), (str(_HEADERS / "std"),)


@cached(1)
def std_headers_shipped() -> frozenset[str]:
    """The standard headers cudamagic ships for device code (``cstdint``, ``math.h``...)."""
    folder = std_header_dirs()[1][0]
    return frozenset(n for n in os.listdir(folder) if not n.startswith("cudamagic_"))


def _libcudacxx_header(name: str, include_dirs: tuple[str, ...]) -> str | None:
    """The ``<cuda/std/...>`` header that stands for a C or C++ standard header (``cstdint``,
    ``stdint.h``), where libcu++ has one in these folders."""
    stem = name[:-2] if name.endswith(".h") else name
    for candidate in dict.fromkeys((f"cuda/std/{stem}", f"cuda/std/c{stem}")):
        if any(os.path.isfile(os.path.join(d, candidate)) for d in include_dirs):
            return candidate
    return None


def _own_header_hint(name: str, source: str = "") -> str:
    """Where NVRTC looked for a header of the user's own that it could not open."""
    try:
        here = f" ({os.getcwd()})"
    except OSError:
        here = ""
    if os.path.isfile(name) and re.search(r'^[ \t]*#[ \t]*include[ \t]*<' + re.escape(name)
                                          + ">", source, re.M):
        return (f'"{name}" is in the current folder{here}, but an include in angle brackets '
                f'(<{name}>) does not look there: write #include "{name}", or add -I . to '
                "the %%cuda line")
    return (f'"{name}" is in neither the current folder{here}, where NVRTC looks first for a '
            "quoted include, nor any -I folder: put it there, add -I DIR to the %%cuda line "
            "(a relative DIR is taken from the current folder), or %cd to its folder")


def include_hints(log: str, source: str = "", include_dirs: tuple[str, ...] | None = None,
                  std_headers: bool = False) -> list[str]:
    """What to do about the headers a failed compile could not use, one line each.

    A standard header NVRTC cannot open is named with its libcu++ stand-in (``<cstdint>``:
    ``<cuda/std/cstdint>``), and where cudamagic has it but ``std_headers`` says it was left
    out, so; a toolkit header with the wheel that ships it; ``<cub/cub.cuh>`` (and without the
    standard headers ``<thrust/complex.h>``) with what compiles instead.
    """
    dirs = toolkit().include_dirs if include_dirs is None else include_dirs
    hints: list[str] = []
    for name in dict.fromkeys(_CANNOT_OPEN.findall(log)):
        stand_in = _libcudacxx_header(name, dirs) if "/" not in name else None
        if stand_in and not std_headers and name in std_headers_shipped():
            hints.append(f"<{name}>: NVRTC has no C++ standard library, and cudamagic's "
                         "<{name}> for device code is turned off (--no-std-headers / "
                         f"std_headers=False): leave that out, or #include <{stand_in}> "
                         "(namespace cuda::std)".replace("{name}", name))
        elif stand_in:
            hints.append(f"<{name}>: NVRTC has no C++ standard library; libcu++ has the same "
                         f"for device code: #include <{stand_in}> (namespace cuda::std)")
        elif name in _WHEEL_HEADERS:
            hints.append(f"<{name}> is not installed: pip install {_WHEEL_HEADERS[name]} (a "
                         "dependency of cudamagic[cu13]), or set CUDA_HOME to a CUDA toolkit")
        elif name.startswith(("cutlass/", "cute/")):
            hints.append(f"<{name}> is CUTLASS's (CuTe's), not found: pip install "
                         "nvidia-cutlass (cudamagic's cutlass extra), set $CUTLASS_PATH to a "
                         "CUTLASS checkout, or give -I DIR with its headers (%cuda_info says "
                         "which CUTLASS a cell gets)")
        elif name in _STANDARD:
            hints.append(f"<{name}>: NVRTC has no C or C++ standard library and libcu++ has no "
                         f"<cuda/std/...> for it; device code uses the built-in CUDA functions "
                         "(printf, malloc, the math functions) without an include")
        elif name not in _HOST_ONLY and name not in _NEEDS_STD_HEADERS:
            hints.append(_own_header_hint(name, source))
    included = set(_INCLUDE.findall(source))
    hints += [text for header, text in _HOST_ONLY.items() if header in included]
    if not std_headers:
        hints += [text for header, text in _NEEDS_STD_HEADERS.items() if header in included]
    return hints


_INCLUDE_FORM = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(<|")([^>"]+)[>"]', re.M)


def known_to_fail(source: str, include_dirs: Sequence[str], cwd: str
                  ) -> list[tuple[int, str, str]]:
    """The cell's own ``#include`` lines of a header in :data:`KNOWN_TO_FAIL` that would read
    the toolkit's copy: ``(source line, header, what to do)`` each. A header of that name
    found first in the cell's current folder (a quoted include) or an ``-I`` folder of the
    user's is the project's own: not named. ``include_dirs`` are the folders as NVRTC is
    given them (relative ones from ``cwd``)."""
    found = []
    kit: set[str] | None = None
    for m in _INCLUDE_FORM.finditer(source):
        quoted, name = m.group(1) == '"', m.group(2)
        if name not in KNOWN_TO_FAIL:
            continue
        if kit is None:
            kit = {os.path.normpath(d) for d in toolkit().include_dirs}
        dirs = [cwd] * quoted + [os.path.join(cwd, d) for d in include_dirs]
        first = next((d for d in dirs if os.path.isfile(os.path.join(d, name))), None)
        if first is not None and os.path.normpath(first) in kit:
            found.append((source.count("\n", 0, m.start()) + 1, name, KNOWN_TO_FAIL[name]))
    return found


def loaded_libraries(stem: str) -> tuple[str, ...]:
    """``file name:size`` of each library named ``stem...`` this process has mapped (what a
    version number leaves out: a patch release of a library outside a wheel); () where none
    is, or off Linux."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith(stem) and path not in found:
                    try:
                        found[path] = f"{os.path.basename(path)}:{os.stat(path).st_size}"
                    except OSError:
                        found[path] = os.path.basename(path)
    except OSError:  # not Linux: the version and the wheel say it
        return ()
    return tuple(sorted(set(found.values())))


def install_command(extra: str) -> str:
    """The command that installs cudamagic's ``extra`` (``cu13``) from where this cudamagic
    came from: cudamagic is on no package index, so ``pip install 'cudamagic[cu13]'`` finds
    nothing (or someone else's package).

    A checkout (this package beside its ``pyproject.toml``, editable or on ``sys.path``):
    ``pip install -e '<checkout>[cu13]'``; the wheel file or folder pip installed it from, where
    it still is: ``pip install '<that>[cu13]'``; else the extra's own requirements as the
    installed metadata lists them, which the package index has.
    """
    import json
    import shlex
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    root = Path(__file__).resolve().parent.parent.parent
    project = root / "pyproject.toml"
    if project.is_file() and re.search(r'(?m)^name\s*=\s*"cudamagic"', project.read_text()):
        return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    try:
        dist = metadata.distribution("cudamagic")
    except metadata.PackageNotFoundError:
        dist = None
    origin = json.loads(dist.read_text("direct_url.json") or "{}") if dist else {}
    url = urlparse(origin.get("url", ""))
    where = Path(unquote(url.path)) if url.scheme == "file" else None
    if where is not None and where.exists():
        return f"pip install {shlex.quote(f'{where}[{extra}]')}"
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    needs = [r.split(";")[0].strip() for r in (dist.requires or []) if marker.search(r)] \
        if dist else []
    if needs:
        return "pip install " + " ".join(shlex.quote(r) for r in needs)
    return (f"pip install '<the wheel or checkout cudamagic came from>[{extra}]' (cudamagic "
            "is on no package index)")
