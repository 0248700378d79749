"""nvJitLink: relocatable device code, LTO IR and PTX linked into one loadable CUBIN.

NVRTC with ``-rdc=true`` (or ``-dc``) makes a relocatable CUBIN (ELF type 1): its calls to
functions outside it (``cudaLaunchDevice`` for a kernel that launches a kernel, ``__device__``
functions marked ``extern``) are unresolved until a linker puts them together with the device
runtime library, ``libcudadevrt.a``. With ``-dlto`` NVRTC makes LTO IR instead of a CUBIN, which
only nvJitLink (with ``-lto``) turns into code. PTX from elsewhere (``nvcc -ptx``) is compiled
for the target the same way. What comes out is an executable CUBIN (ELF type 2), which the
driver loads like any other; that is what the cache keeps.
"""

from __future__ import annotations

import enum
import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.process import cached
from ...errors import ImageError, LinkError
from ...core.options import lto, relocatable
from ..binary.elf import ET_EXEC, ET_REL, elf_type
from ..binary.image import device_runtime_kernels, from_device_runtime

__all__ = ["CodeKind", "LinkInput", "LinkResult", "link", "link_compiled", "link_needing_runtime", "relocatable", "lto",
           "device_runtime", "nvjitlink_version", "nvjitlink_identity", "undefined_symbols",
           "from_device_runtime", "device_runtime_kernels",
           "Flag", "CodeGeneration", "code_generation"]

class CodeKind(enum.Enum):
    """What a piece of device code is; the value names it in a link cache key."""

    CUBIN = "cubin"    # a relocatable or executable CUBIN
    LTOIR = "ltoir"    # NVRTC's -dlto output
    PTX = "ptx"
    FATBIN = "fatbin"


@dataclass(frozen=True)
class LinkInput:
    """One input to a link: its bytes, what they are, and a name for the linker's messages.

    Attributes
    ----------
    data : bytes
    kind : CodeKind
    name : str
    """

    data: bytes
    kind: CodeKind
    name: str = "cell"


@dataclass(frozen=True)
class LinkResult:
    """A linked CUBIN, nvJitLink's info log and the link's wall time."""

    cubin: bytes
    log: str
    seconds: float


def _nvjitlink():
    """``cuda.bindings.nvjitlink`` with its library loaded.

    :raises LinkError: it cannot be loaded (the ``nvidia-nvjitlink`` wheel is not installed).
    """
    try:
        from cuda.bindings import nvjitlink

        nvjitlink.version()  # loads libnvJitLink: an import alone does not
    except Exception as exc:  # ImportError, or the library not found when first called
        raise LinkError("linking device code needs nvJitLink, which could not be loaded "
                        f"({type(exc).__name__}: {exc}); install it with "
                        "`pip install nvidia-nvjitlink` (a cudamagic dependency)") from None
    return nvjitlink


@cached(1)
def nvjitlink_version() -> str:
    """nvJitLink's version as ``"major.minor"``.

    :raises LinkError: nvJitLink cannot be loaded.
    """
    major, minor = _nvjitlink().version()
    return f"{major}.{minor}"


@cached(1)
def nvjitlink_identity() -> str:
    """What identifies the nvJitLink this process links with, exactly, for a cache key:
    its version, the ``nvidia-nvjitlink`` wheel's dist-info name (``...-13.0.88.dist-info``:
    the patch release that ``version()``'s major.minor leaves out), and the loaded library's
    file name and size (a library from elsewhere than the wheel, such as a CUDA toolkit's).

    :raises LinkError: nvJitLink cannot be loaded.
    """
    from ...core.toolkit import loaded_libraries, toolkit

    version = nvjitlink_version()
    wheel = next((d for d in toolkit().distributions if d.startswith("nvidia_nvjitlink")), "")
    return ";".join((version, wheel, *loaded_libraries("libnvJitLink")))


def _package_lib_dirs() -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted((d for root in spec.submodule_search_locations
                   for d in Path(root).glob("cu*/lib")), reverse=True)


@cached(1)
def device_runtime() -> Path | None:
    """``libcudadevrt.a``, the device runtime a kernel that launches kernels links with: the
    ``nvidia-cuda-runtime`` wheel's, else ``$CUDA_HOME``'s or ``/usr/local/cuda``'s."""
    places = _package_lib_dirs()
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            places += [Path(os.environ[var]) / "lib64", Path(os.environ[var]) / "lib"]
    places.append(Path("/usr/local/cuda/lib64"))
    return next((p / "libcudadevrt.a" for p in places if (p / "libcudadevrt.a").is_file()),
                None)


def _logs(nvjitlink, handle) -> tuple[str, str]:
    """nvJitLink's (error log, info log)."""
    out = []
    for size_of, get in ((nvjitlink.get_error_log_size, nvjitlink.get_error_log),
                         (nvjitlink.get_info_log_size, nvjitlink.get_info_log)):
        try:
            size = size_of(handle)
            buf = bytearray(size)  # written into by the library: a fresh, writable buffer
            get(handle, buf)
            out.append(bytes(buf).rstrip(b"\0 \n").decode("utf-8", "replace"))
        except Exception:  # a log that cannot be read says nothing more
            out.append("")
    return out[0], out[1]


def link(inputs: Sequence[LinkInput], arch: str, *, lto_ir: bool = False,
         device_runtime_library: bool = True, options: Sequence[str] = (),
         emit_ptx: bool = False) -> LinkResult:
    """Link device code into one executable CUBIN for ``arch`` with nvJitLink.

    Parameters
    ----------
    inputs : sequence of LinkInput
    arch : str
        ``sm_XX``: the CUBIN's target (PTX and LTO IR are compiled for it).
    lto_ir : bool
        An input is LTO IR: link with ``-lto`` (link-time optimisation).
    device_runtime_library : bool
        Link ``libcudadevrt.a`` (device-side launches, ``cudaDeviceSynchronize`` in kernels).
    options : sequence of str
        More nvJitLink options (``-lineinfo``, ``-G``...).
    emit_ptx : bool
        Stop at the PTX the link-time optimisation makes (``-ptx``, LTO IR only): the result's
        ``cubin`` is that PTX text, no CUBIN (nvJitLink gives one or the other per link).

    :raises LinkError: nvJitLink is missing or refused the inputs (its error log is the
        message), or a device-runtime call is left unresolved without ``libcudadevrt.a``.
    """
    nvjitlink = _nvjitlink()
    start = time.perf_counter()
    opts = [f"-arch={arch}", *(["-lto"] if lto_ir else []), *options, *(["-ptx"] * emit_ptx)]
    try:
        handle = nvjitlink.create(len(opts), opts)
    except nvjitlink.nvJitLinkError as exc:
        raise LinkError(f"nvJitLink {nvjitlink_version()} refused the options "
                        f"{' '.join(opts)}: {exc}") from None
    devrt = None
    try:
        step = "adding the inputs"
        for item in inputs:
            nvjitlink.add_data(handle, getattr(nvjitlink.InputType, item.kind.name), item.data, len(item.data), item.name)
        devrt = device_runtime() if device_runtime_library else None
        if devrt is not None:
            nvjitlink.add_file(handle, nvjitlink.InputType.LIBRARY, str(devrt))
        step = "linking"
        nvjitlink.complete(handle)
        size_of, get = (nvjitlink.get_linked_ptx_size, nvjitlink.get_linked_ptx) if emit_ptx \
            else (nvjitlink.get_linked_cubin_size, nvjitlink.get_linked_cubin)
        cubin = bytearray(size_of(handle))
        get(handle, cubin)
        _, info = _logs(nvjitlink, handle)
    except nvjitlink.nvJitLinkError as exc:
        error, info = _logs(nvjitlink, handle)
        text = error or info or str(exc)
        hint = _failure_hint(text, device_runtime_library and devrt is None, lto_ir)
        raise LinkError(f"nvJitLink could not link the device code for {arch} ({step}):\n"
                        f"{text}{hint}", text) from None
    finally:
        nvjitlink.destroy(handle)
    linked = bytes(cubin)
    if not emit_ptx and elf_type(linked) != ET_EXEC:
        raise LinkError(f"nvJitLink's output is not an executable CUBIN (ELF type "
                        f"{elf_type(linked)}); it is not loaded or cached")
    return LinkResult(linked, info, time.perf_counter() - start)


def _failure_hint(log: str, runtime_missing: bool, lto_ir: bool) -> str:
    """What to do about a failed link, where nvJitLink's log names a likely cause."""
    if runtime_missing and "cudaLaunchDevice" in log:
        return ("\nthe device runtime library (libcudadevrt.a) was not found: it comes "
                "with the nvidia-cuda-runtime wheel (pip install nvidia-cuda-runtime)")
    if lto_ir and "version" in log.lower():
        return (f"\nLTO IR must come from an NVRTC no newer than nvJitLink "
                f"{nvjitlink_version()}: upgrade nvidia-nvjitlink")
    return ""


def undefined_symbols(cubin: bytes) -> list[str]:
    """The symbols a relocatable CUBIN uses but does not define (``__cudaCDP2LaunchDeviceV2``
    for a kernel that launches kernels): what a link must bring in."""
    from ..binary.image import undefined_globals

    try:
        return undefined_globals(cubin)
    except ImageError:  # not a CUBIN, or a damaged table: nothing a link is known to need
        return []


_UNRESOLVED = ("Unresolved extern", "Undefined reference")


def link_needing_runtime(inputs: Sequence[LinkInput], arch: str, **options: Any) -> LinkResult:
    """:func:`link` without the device runtime, and again with it where the first link left
    symbols unresolved (for inputs whose symbols cannot be read beforehand: LTO IR, PTX).

    :raises LinkError: as :func:`link`.
    """
    try:
        return link(inputs, arch, device_runtime_library=False, **options)
    except LinkError as exc:
        if not any(u in exc.log for u in _UNRESOLVED):
            raise
    return link(inputs, arch, **options)


class Flag(enum.Enum):
    """A code-generation switch NVRTC and nvJitLink both take (nvJitLink spells it ``-NAME=0/1``,
    NVRTC ``--NAME=true/false``)."""

    FMA = "fma"
    FTZ = "ftz"
    PREC_DIV = "prec-div"
    PREC_SQRT = "prec-sqrt"


# NVRTC's spellings of each switch (NVRTC's own option list: --fmad is nvJitLink's -fma)
_FLAG_SPELLING = {"fmad": Flag.FMA, "ftz": Flag.FTZ, "prec-div": Flag.PREC_DIV,
                  "prec-sqrt": Flag.PREC_SQRT}
# what -use_fast_math sets where the options do not set it themselves (NVRTC: an explicit
# switch wins over -use_fast_math wherever it stands)
_FAST_MATH = {Flag.FTZ: True, Flag.PREC_DIV: False, Flag.PREC_SQRT: False, Flag.FMA: True}
_BOOLS = {"true": True, "false": False}


@dataclass(frozen=True)
class CodeGeneration:
    """What an NVRTC option list says about the machine code, for a link that makes it: with
    ``-dlto`` NVRTC makes LTO IR and nvJitLink generates the code, so each of these must reach
    nvJitLink or the link makes the default code.

    Attributes
    ----------
    flags : tuple of (Flag, bool)
        Each switch the options set, explicitly or through ``-use_fast_math``, in Flag order.
    max_registers : int or None
        ``-maxrregcount=N`` (the last one given).
    debug, lineinfo : bool
        ``-G`` (nvJitLink's ``-g``), ``-lineinfo``.
    ptxas : tuple of str
        The ``-Xptxas`` values, in order (nvJitLink runs ptxas itself).
    """

    flags: tuple[tuple[Flag, bool], ...] = ()
    max_registers: int | None = None
    debug: bool = False
    lineinfo: bool = False
    ptxas: tuple[str, ...] = ()

    def nvjitlink_options(self) -> tuple[str, ...]:
        """The nvJitLink options that make the same code (nvJitLink's documented spellings)."""
        out = [f"-{flag.value}={int(on)}" for flag, on in self.flags]
        if self.max_registers is not None:
            out.append(f"-maxrregcount={self.max_registers}")
        out += ["-g"] * self.debug + ["-lineinfo"] * self.lineinfo
        return (*out, *(f"-Xptxas={v}" for v in self.ptxas))


def code_generation(options: Sequence[str]) -> CodeGeneration:
    """The code-generation options of an NVRTC option list (:class:`CodeGeneration`); the
    other options (``-D``, ``-I``, ``-std``...) say nothing about it."""
    explicit: dict[Flag, bool] = {}
    fast = debug = lineinfo = False
    registers: int | None = None
    ptxas: list[str] = []
    for opt in options:
        name, _, value = opt.lstrip("-").partition("=")
        if name in _FLAG_SPELLING and value in _BOOLS:
            explicit[_FLAG_SPELLING[name]] = _BOOLS[value]  # the last one given wins
        elif name in ("use_fast_math", "use-fast-math") and not value:
            fast = True
        elif name == "maxrregcount" and value.isdigit():
            registers = int(value)
        elif opt in ("-G", "--device-debug"):
            debug = True
        elif opt in ("-lineinfo", "--generate-line-info"):
            lineinfo = True
        elif name in ("Xptxas", "ptxas-options") and value:
            ptxas.append(value)
    implied = {**(_FAST_MATH if fast else {}), **explicit}
    flags = tuple((f, implied[f]) for f in Flag if f in implied)
    return CodeGeneration(flags, registers, debug, lineinfo, tuple(ptxas))


def link_compiled(result, arch: str, options: Sequence[str]):
    """An NVRTC :class:`~cudamagic.toolchain.compile.nvrtc.CompileResult` of relocatable code or LTO IR
    with its output replaced by the linked, executable CUBIN (compile time and log include the
    link's).

    The device runtime is linked where the code needs it: a relocatable CUBIN that leaves
    symbols undefined, or LTO IR whose first link without it fails (LTO IR names no symbols
    that can be read beforehand); linking it otherwise would add its helper kernels.

    :raises LinkError: the code cannot be linked (the message says why); nothing is cached.
    """
    import dataclasses

    is_lto = lto(options)
    if not is_lto and elf_type(result.cubin) != ET_REL:
        return result  # -rdc=false after -rdc=true, or whole-program code after all
    item = LinkInput(result.cubin, CodeKind.LTOIR if is_lto else CodeKind.CUBIN, "cell.cu")
    # nvJitLink generates the code of LTO IR itself: every option that shapes it goes along;
    # relocatable code is machine code already, and its link keeps debug and line information
    codegen = code_generation(options)
    syncs = result.grid_sync
    if is_lto:
        linked = link_needing_runtime([item], arch, lto_ir=True,
                                      options=codegen.nvjitlink_options())
        syncs = _lto_grid_syncs(item, arch, codegen, linked.cubin)
    else:
        kept = ["-g"] * codegen.debug + ["-lineinfo"] * codegen.lineinfo
        linked = link([item], arch, device_runtime_library=bool(undefined_symbols(result.cubin)),
                      options=kept)
    # nvJitLink's INFO lines (an LTO container's size) are no warning about the cell
    said = "\n".join(x for x in linked.log.splitlines() if not x.startswith("INFO:"))
    log = "\n".join(x for x in (result.log, said) if x)
    return dataclasses.replace(result, cubin=linked.cubin, log=log, grid_sync=syncs,
                               seconds=result.seconds + linked.seconds)


def _lto_grid_syncs(item: LinkInput, arch: str, codegen: CodeGeneration,
                    cubin: bytes) -> dict[str, bool] | None:
    """Which kernels of LTO IR synchronise the grid, read from the PTX the link-time
    optimisation makes (:func:`~cudamagic.toolchain.binary.ptx.grid_syncs`): NVRTC makes none with
    ``-dlto``, and nvJitLink gives PTX or a CUBIN per link, so this is one more link, run only
    where the linked CUBIN's records leave a kernel's grid sync open (a cooperative-groups
    barrier beside a trap, or a ``-G`` build's); None where it is not run or fails (the
    CUBIN's records decide)."""
    from ..binary.image import read_cubin
    from ..binary.ptx import grid_syncs

    try:
        if all(k.launch.grid_sync is False for k in read_cubin(cubin).kernels):
            return None
    except ImageError:  # the pipeline's own read says what is wrong with it
        return None
    try:
        ptx = link([item], arch, lto_ir=True, device_runtime_library=False,
                   options=codegen.nvjitlink_options(), emit_ptx=True)
    except LinkError:  # a link that needs the device runtime's code: no PTX of it alone
        return None
    return grid_syncs(ptx.cubin)
