"""The libraries a cell includes beyond the toolkit: CUTLASS and CuTe. Where their headers are
found (an ``-I`` folder, ``$CUTLASS_PATH``, the ``nvidia-cutlass`` wheel), and what a build of a
cell whose ``#include`` lines name them adds: their folder, cudamagic's ``cccl/`` layout and
``-default-device``. A cell that includes none gets nothing from here, and its key is not
touched. Cheap: found without importing the wheel (its Python part imports cuda-python).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError
from .options import STDS, BuildOptions
from .process import cached
from .toolkit import package_dir, search_folders, travelling_name

__all__ = ["Cutlass", "CutlassOrigin", "cutlass", "has_cutlass", "cccl_layout_dir",
           "CUTLASS_ENV", "LibraryOptions", "NO_LIBRARY", "library_options"]

#: The folder of a CUTLASS checkout (its headers in ``include/``) or of its headers.
CUTLASS_ENV = "CUTLASS_PATH"
# a folder holds CUTLASS (or CuTe, which CUTLASS ships) where one of these is in it
_CUTLASS_MARKS = ("cutlass/cutlass.h", "cute/tensor.hpp")
_CUTLASS_WHEEL = ("cutlass_library", "source/include")  # the package and its headers' folder
_CUTLASS_VERSION = re.compile(r"^[ \t]*#[ \t]*define[ \t]+CUTLASS_(MAJOR|MINOR|PATCH)[ \t]+(\d+)",
                              re.M)


class CutlassOrigin(str, enum.Enum):
    """Where a build's CUTLASS headers come from (the first that has them)."""

    INCLUDE = "an -I folder"
    PATH = f"${CUTLASS_ENV}"
    WHEEL = "the nvidia-cutlass wheel"


@dataclass(frozen=True)
class Cutlass:
    """CUTLASS and CuTe as a build finds them.

    Attributes
    ----------
    include_dir : str
        The folder that holds ``cutlass/`` and ``cute/``.
    origin : CutlassOrigin
    name : str
        The folder's name that travels (``site-packages/cutlass_library/source/include``,
        ``$CUTLASS_PATH/include``); an ``-I`` folder's is its own.
    version : str
        The wheel's version; for a folder, what its ``cutlass/version.h`` defines (``""``:
        none there).
    dist : str
        The wheel's ``.dist-info`` name (``""`` for a folder): a new version is in the key.
    """

    include_dir: str
    origin: CutlassOrigin
    name: str
    version: str = ""
    dist: str = ""

    @property
    def versioned(self) -> bool:
        """A package's folder: its headers are checked by their size and times, as the
        toolkit's are; a folder of the user's by their content."""
        return self.origin is CutlassOrigin.WHEEL

    def describe(self) -> str:
        """``4.2.0.0 (the nvidia-cutlass wheel: /...)`` for ``%cuda_info``."""
        version = f"{self.version} " if self.version else "version unknown "
        return f"{version}({self.origin.value}: {self.include_dir})"


def has_cutlass(folder: str) -> bool:
    """Whether ``folder`` holds CUTLASS's or CuTe's headers."""
    return any(os.path.isfile(os.path.join(folder, m)) for m in _CUTLASS_MARKS)


def _folder_version(folder: str) -> str:
    """``MAJOR.MINOR.PATCH`` as ``cutlass/version.h`` defines them, for the user to read."""
    try:
        with open(os.path.join(folder, "cutlass", "version.h"), encoding="utf-8",
                  errors="replace") as f:
            found = dict(_CUTLASS_VERSION.findall(f.read(65536)))
    except OSError:
        return ""
    parts = [found.get(k) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p for p in parts if p is not None) if parts[0] is not None else ""


def cutlass(user_dirs: tuple[str, ...] = ()) -> Cutlass | None:
    """The CUTLASS a build that includes it uses: the first of ``user_dirs`` (absolute ``-I``
    folders) that holds it, else ``$CUTLASS_PATH`` (a checkout, whose headers are in its
    ``include/``, or that folder itself), else the ``nvidia-cutlass`` wheel; None where there
    is none. One only: the wheel's headers never fill in for a folder the user named.

    :raises OptionError: ``$CUTLASS_PATH`` names a folder without CUTLASS's headers.
    """
    for d in user_dirs:
        if has_cutlass(d):
            return Cutlass(d, CutlassOrigin.INCLUDE, d, _folder_version(d))
    env = os.environ.get(CUTLASS_ENV)
    if env:
        return _cutlass_at(os.path.abspath(env))
    return _wheel_cutlass(search_folders())


@cached(4)
def _cutlass_at(root: str) -> Cutlass:
    for sub, name in (("include", f"${CUTLASS_ENV}/include"), ("", f"${CUTLASS_ENV}")):
        folder = os.path.join(root, sub) if sub else root
        if has_cutlass(folder):
            return Cutlass(folder, CutlassOrigin.PATH, name, _folder_version(folder))
    raise OptionError(f"${CUTLASS_ENV} is {root}, which holds no CUTLASS headers (looked for "
                      f"{_CUTLASS_MARKS[0]} in {os.path.join(root, 'include')} and in it): set "
                      f"it to a CUTLASS checkout, or unset it to use the nvidia-cutlass wheel")


@cached(1)
def _wheel_cutlass(folders: tuple[tuple[str, int | None], ...]) -> Cutlass | None:
    """The wheel's CUTLASS for this state of ``sys.path``'s folders (the key)."""
    package = package_dir(_CUTLASS_WHEEL[0])
    if package is None or not has_cutlass(str(package / _CUTLASS_WHEEL[1])):
        return None
    site = package.parent
    try:
        dist = next((n for n in sorted(os.listdir(site))
                     if n.startswith("nvidia_cutlass-") and n.endswith(".dist-info")), "")
    except OSError:
        dist = ""
    folder = str(package / _CUTLASS_WHEEL[1])
    version = dist[len("nvidia_cutlass-"):-len(".dist-info")] if dist else ""
    return Cutlass(folder, CutlassOrigin.WHEEL, travelling_name(folder, [str(site)], ()),
                   version, dist)


def cccl_layout_dir() -> str:
    """cudamagic's ``cccl/`` layout: CUTLASS for CUDA 13 includes ``<cccl/cuda/std/...>``, as
    the CUDA toolkit lays CCCL out; CuPy's CCCL, which every build searches, has
    ``<cuda/std/...>``. Each header there forwards to the ``<cuda/std/...>`` of that name, so
    a CUTLASS cell reads one CCCL (the toolkit's ``include/`` beside CuPy's would mix two)."""
    return str(Path(__file__).resolve().parent.parent / "headers" / "cccl")



@dataclass(frozen=True)
class LibraryOptions:
    """What a build adds because its cell includes a library's headers (CUTLASS, CuTe).

    Attributes
    ----------
    library : str
        ``"CUTLASS"``; ``""``: nothing added.
    options : tuple of str
        The NVRTC options added, after the user's own (in the key, as every option is).
    shown : tuple of str
        The same as the report says them: each folder by its name that travels.
    versioned : tuple of str
        Added folders of installed packages (checked on a hit as the toolkit's are).
    named : tuple of (str, str, str)
        ``(folder, root, "")`` of each added folder whose name travels
        (:attr:`cudamagic.toolchain.compile.manifest.SearchPath.named`).
    fingerprint : str
        Added to the toolkit's fingerprint in the key (``;nvidia_cutlass-4.2.0.0.dist-info``).
    notes : tuple of str
        What the user should know (a standard older than the library needs, kept).
    """

    library: str = ""
    options: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()
    versioned: tuple[str, ...] = ()
    named: tuple[tuple[str, str, str], ...] = ()
    fingerprint: str = ""
    notes: tuple[str, ...] = ()


NO_LIBRARY = LibraryOptions()
# the first folder of a header name that is CUTLASS's or CuTe's
_CUTLASS_FOLDERS = ("cutlass", "cute")
# NVRTC's spellings of -default-device (functions without __host__/__device__ are device code)
_DEFAULT_DEVICE = ("-default-device", "--device-as-default-execution-space")


def library_options(opts: BuildOptions, included: Sequence[str],
                    base_dir: str | os.PathLike) -> LibraryOptions:
    """What a cell that includes CUTLASS or CuTe needs under NVRTC, decided from the header
    names its ``#include`` directives name (``included``; anything else: :data:`NO_LIBRARY`).

    CUTLASS's headers (:func:`cutlass`: an ``-I`` folder, ``$CUTLASS_PATH``
    or the wheel; none added where an ``-I`` folder has them), cudamagic's ``cccl/`` layout
    (:func:`cccl_layout_dir`), and ``-default-device`` (CUTLASS declares
    functions without ``__device__``, which NVRTC refuses otherwise) unless given. The
    standard stays the user's: C++17, CUTLASS's, is the default; an older one is said.

    :raises OptionError: ``$CUTLASS_PATH`` holds no CUTLASS.
    """
    if not any(h.split("/", 1)[0] in _CUTLASS_FOLDERS and "/" in h for h in included):
        return NO_LIBRARY
    base = Path(base_dir)
    user = tuple(d if os.path.isabs(d) else str((base / d).resolve()) for d in opts.include_dirs)
    found = cutlass(user)
    options: list[str] = []
    shown: list[str] = []
    versioned: list[str] = []
    named: list[tuple[str, str, str]] = []
    if found is not None and found.origin is not CutlassOrigin.INCLUDE:
        options.append(f"-I{found.include_dir}")
        shown.append(f"-I {found.name}")
        named.append((found.include_dir, found.name, ""))
        versioned += [found.include_dir] if found.versioned else []
    layout = cccl_layout_dir()
    options.append(f"-I{layout}")
    shown.append("-I cudamagic-cccl")
    named.append((layout, "cudamagic-cccl", ""))
    versioned.append(layout)
    if not any(o in _DEFAULT_DEVICE for o in opts.options):
        options.append(_DEFAULT_DEVICE[0])
        shown.append(_DEFAULT_DEVICE[0])
    notes = () if STDS.index(opts.std) >= STDS.index("c++17") else (
        f"CUTLASS and CuTe need C++17 or later; --std {opts.std} is kept as given",)
    return LibraryOptions("CUTLASS", tuple(options), tuple(shown), tuple(versioned),
                          tuple(named), f";{found.dist}" if found and found.dist else "",
                          notes)
