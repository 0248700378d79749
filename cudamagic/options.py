"""The magic line and build arguments as one frozen record, and the NVRTC options it implies.

Pure apart from locating header folders in installed packages (no CUDA call, no cupy import).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import os
import re
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path

from .errors import InputWarning, OptionError

__all__ = [
    "BuildOptions",
    "DEFAULT_ARCH",
    "DEFAULT_STD",
    "DEFAULT_MODULE",
    "magic_parser",
    "parse_magic_line",
    "normalize_arch",
    "nvrtc_options",
    "system_include_dirs",
    "toolkit_fingerprint",
    "nvrtc_wheel",
]

#: The architecture a build targets where no GPU is there to ask (Hopper: H100, H200).
DEFAULT_ARCH = "sm_90"
DEFAULT_STD = "c++17"
DEFAULT_MODULE = "cuda_module"
_STDS = ("c++03", "c++11", "c++14", "c++17", "c++20")
# NVRTC options this project sets itself (through its own flags), and ones that make no CUBIN.
_OWN = {"-arch": "--arch", "--gpu-architecture": "--arch", "-std": "--std", "--std": "--std",
        "-I": "-I", "--include-path": "-I", "-D": "-D", "--define-macro": "-D"}
_REFUSED = ("-dlto", "--dlink-time-opt", "-M", "--generate-dependencies", "-ptx", "-lto")


@dataclass(frozen=True)
class BuildOptions:
    """Everything a ``%%cuda`` line or a :func:`cudamagic.build` call can set.

    Attributes
    ----------
    name_expressions : tuple of str
        The user's exact strings, duplicates removed, order kept.
    arch : str or None
        ``sm_XX``; None means the current device's, or :data:`DEFAULT_ARCH` without a GPU.
    std : str
        C++ dialect (``c++17``).
    include_dirs, defines, extra : tuple of str
        ``-I`` folders, ``-D`` macros (``NAME`` or ``NAME=VAL``), other NVRTC options as given.
    module : str
        The Python name the module is pushed under.
    force, no_cache, quiet : bool
    """

    name_expressions: tuple[str, ...] = ()
    arch: str | None = None
    std: str = DEFAULT_STD
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    module: str = DEFAULT_MODULE
    force: bool = False
    no_cache: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        for expr in self.name_expressions:
            if not isinstance(expr, str) or not expr.strip():
                raise OptionError(f"a name expression must be a non-empty string, got {expr!r}")
            if "\0" in expr or "\n" in expr:
                raise OptionError(f"name expression {expr!r} holds a NUL byte or a line break")
        if self.arch is not None:
            object.__setattr__(self, "arch", normalize_arch(self.arch))
        std = self.std if self.std.startswith("c++") else f"c++{self.std}"
        if std not in _STDS:
            raise OptionError(f"--std {self.std!r} is not one of {', '.join(_STDS)}")
        object.__setattr__(self, "std", std)
        if not self.module.isidentifier():
            raise OptionError(f"--module {self.module!r} is not a Python identifier")
        for d in self.defines:
            if not re.fullmatch(r"[A-Za-z_]\w*(\(.*\))?(=.*)?", d, re.S):
                raise OptionError(f"-D {d!r} is not NAME or NAME=VALUE")
        for opt in self.extra:
            _check_extra(opt)
        deduped = tuple(dict.fromkeys(self.name_expressions))
        if len(deduped) != len(self.name_expressions):
            twice = sorted({e for e in self.name_expressions if self.name_expressions.count(e) > 1})
            warnings.warn(f"-n given more than once for {', '.join(map(repr, twice))}: "
                          "each is compiled once", InputWarning, stacklevel=3)
        object.__setattr__(self, "name_expressions", deduped)


def _check_extra(opt: str) -> None:
    if not opt.startswith("-"):
        raise OptionError(f"-o {opt!r}: an NVRTC option starts with '-'")
    flag = opt.split("=", 1)[0]
    for own, ours in _OWN.items():
        if flag == own or (own in ("-I", "-D") and opt.startswith(own) and len(opt) > 2):
            raise OptionError(f"-o {opt!r} conflicts with this magic's own {ours} option: "
                              f"use {ours} instead")
    if flag.startswith(_REFUSED):
        raise OptionError(f"-o {opt!r}: that option makes no CUBIN, which is what is cached")


def normalize_arch(arch: str | int) -> str:
    """``"sm_90"``, ``"90"``, ``90``, ``"sm_90a"`` -> ``"sm_90"``/``"sm_90a"``.

    :raises OptionError: anything else (``compute_XX`` makes PTX, not a CUBIN).
    """
    text = str(arch).strip().lower()
    m = re.fullmatch(r"(?:sm_)?(\d{2,3})([af]?)", text)
    if not m:
        raise OptionError(f"--arch {arch!r} is not a real GPU architecture such as sm_90 "
                          "(a CUBIN is built for one; compute_XX would give PTX)")
    return f"sm_{m.group(1)}{m.group(2)}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit the kernel
        raise OptionError(f"%%cuda: {message}")


@functools.lru_cache(maxsize=1)
def magic_parser() -> argparse.ArgumentParser:
    """The ``%%cuda`` line's parser; its help is the magic's help."""
    p = _Parser(prog="%%cuda", add_help=False, description=(
        "Compile the cell's CUDA C++ with NVRTC (cached on disk) and put each kernel into the "
        "notebook as a Python callable."))
    p.add_argument("-n", "--name-expression", action="append", default=[], metavar="EXPR",
                   help='a kernel to instantiate and export, e.g. -n "saxpy<float>" '
                        "(repeatable; quote expressions with spaces or commas)")
    p.add_argument("--arch", default=None, metavar="sm_XX",
                   help=f"target GPU (default: the current device's; {DEFAULT_ARCH} without a GPU)")
    p.add_argument("--std", default=DEFAULT_STD, metavar="c++NN",
                   help=f"C++ dialect (default {DEFAULT_STD})")
    p.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                   help="add a header folder (repeatable)")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VAL]",
                   help="define a macro (repeatable)")
    p.add_argument("-o", "--option", dest="extra", action="append", default=[], metavar="OPT",
                   help="pass an option to NVRTC as is, e.g. -o -lineinfo (repeatable)")
    p.add_argument("--module", default=DEFAULT_MODULE, metavar="NAME",
                   help=f"Python name of the module object (default {DEFAULT_MODULE})")
    p.add_argument("--force", action="store_true", help="recompile and overwrite the cache entry")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    p.add_argument("-q", "--quiet", action="store_true", help="show no report after the cell")
    return p


def parse_magic_line(line: str) -> BuildOptions:
    """Parse a ``%%cuda`` line into :class:`BuildOptions`.

    :raises OptionError: an unknown flag, a missing value, a bad value, or a conflict.
    """
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise OptionError(f"%%cuda: cannot split the line ({exc}): check its quotes") from None
    # "-o -lineinfo": argparse would take "-lineinfo" for a flag of its own; and -n is taken
    # out here, because argparse's parsing grows with the square of the number of options
    joined: list[str] = []
    exprs: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-o", "--option", "-n", "--name-expression") and i + 1 < len(tokens):
            if tok in ("-o", "--option"):
                joined.append(f"--option={tokens[i + 1]}")
            else:
                exprs.append(tokens[i + 1])
            i += 2
        elif tok.startswith("--name-expression="):
            exprs.append(tok.split("=", 1)[1])
            i += 1
        else:
            joined.append(tok)
            i += 1
    ns = magic_parser().parse_args(joined)
    return BuildOptions(
        name_expressions=tuple(exprs) + tuple(ns.name_expression), arch=ns.arch, std=ns.std,
        include_dirs=tuple(ns.include_dirs), defines=tuple(ns.defines), extra=tuple(ns.extra),
        module=ns.module, force=ns.force, no_cache=ns.no_cache, quiet=ns.quiet)


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # finds without importing (cupy's import is slow)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


@functools.lru_cache(maxsize=1)
def system_include_dirs() -> tuple[str, ...]:
    """Header folders every build gets: CuPy's (``<cupy/complex.cuh>``, CCCL) and the toolkit's."""
    dirs: list[Path] = []
    cupy = _package_dir("cupy")
    if cupy:
        inc = cupy / "_core" / "include"
        cccl = inc / "cupy" / "_cccl"
        dirs += [inc, cccl / "libcudacxx", cccl / "cub", cccl / "thrust"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            dirs.append(Path(root) / "include")
    nvidia = _package_dir("nvidia")
    if nvidia:
        dirs += sorted(nvidia.glob("cu*/include"), reverse=True)
    dirs.append(Path("/usr/local/cuda/include"))
    seen: list[str] = []
    for d in dirs:
        if (d / "cuda_fp16.h").is_file() or d.parent.name == "_cccl" or d.name == "include":
            if d.is_dir() and str(d) not in seen:
                seen.append(str(d))
    # one toolkit header folder is enough: the first that has cuda_fp16.h wins
    toolkit = [d for d in seen if Path(d, "cuda_fp16.h").is_file()]
    return tuple(d for d in seen if not Path(d, "cuda_fp16.h").is_file()) + tuple(toolkit[:1])


_FINGERPRINT_DISTS = ("cupy", "nvidia_cuda_runtime", "nvidia_cuda_nvrtc", "nvidia_cuda_cccl")


@functools.lru_cache(maxsize=1)
def toolkit_fingerprint() -> str:
    """What identifies the headers every build sees and the NVRTC that compiles (in the key).

    The names of the installed distributions that ship them (``cupy_cuda13x-14.2.0.dist-info``,
    ``nvidia_cuda_nvrtc-13.5.37.dist-info``...), read off their site-packages folders in one
    listing each, a toolkit's ``version.json`` under ``$CUDA_HOME``, and the header folders.
    Cheap on purpose: it is computed on every first build of a process, hits included.
    """
    parts: list[str] = []
    sites = {d.parent for d in (_package_dir("cupy"), _package_dir("nvidia")) if d is not None}
    for site in sorted(sites):
        try:
            parts += sorted(n for n in os.listdir(site)
                            if n.endswith(".dist-info") and n.startswith(_FINGERPRINT_DISTS))
        except OSError:
            continue
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and os.path.isfile(os.path.join(root, "version.json")):
            with open(os.path.join(root, "version.json"), "rb") as f:
                parts.append(f"{var}:" + hashlib.sha256(f.read()).hexdigest()[:16])
    return ";".join(parts + list(system_include_dirs()))


def nvrtc_wheel() -> str | None:
    """The installed ``nvidia-cuda-nvrtc`` wheel's dist-info name, which NVRTC is loaded from."""
    return next((p for p in toolkit_fingerprint().split(";")
                 if p.startswith("nvidia_cuda_nvrtc")), None)


def nvrtc_options(opts: BuildOptions, arch: str, base_dir: str | os.PathLike | None = None,
                  ) -> tuple[str, ...]:
    """The NVRTC option list for a build, in a fixed order (it is part of the cache key).

    ``base_dir`` (the notebook's folder) resolves relative ``-I`` folders and is searched for
    quoted includes after them.
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    out = [f"-arch={arch}", f"-std={opts.std}"]
    for d in (*opts.include_dirs, str(base)):
        out.append(f"-I{(base / d).resolve() if not os.path.isabs(d) else d}")
    out += [f"-I{d}" for d in system_include_dirs()]
    out += [f"-D{d}" for d in opts.defines]
    out += list(opts.extra)
    return tuple(out)

