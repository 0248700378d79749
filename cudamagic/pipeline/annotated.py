"""``module.annotate()`` and ``%%cuda -a``: the cell's lines with the machine code of its
``-lineinfo`` build (the one tool runs use, :mod:`.lineinfo`), read by nvdisasm, and the
profiles given, as the view of :mod:`cudamagic.view.annotate`.

The disassembly is made once per ``-lineinfo`` CUBIN in a process, by the CUBIN's bytes (its
sha256) and the nvdisasm that read it: kept on the module (choosing another kernel, another
grouping or adding a profile reads no code again) and for the process's later modules of the
same CUBIN (a ``%%cuda -a`` cell run again is a hit: its annotation is that CUBIN's code, read
once). The most recent :data:`KEPT_CUBINS` CUBINs of at most :data:`KEPT_INSTRUCTIONS`
instructions each are kept so.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentValueError, LaunchError
from ..launch.support import LineinfoBuild
from ..core.process import held
from ..toolchain.tools.annotation import annotate
from ..toolchain.tools import tools
from ..toolchain.binary.image import has_line_info, read_cubin
from ..toolchain.tools.profiler import Comparison, Profile
from ..toolchain.tools.sass import FunctionCode, disassemble
from ..view.annotate import AnnotatedView, Grouping

__all__ = ["annotate_module", "KEPT_CUBINS", "KEPT_INSTRUCTIONS"]

#: the CUBINs whose disassembly a process keeps for its later modules, the most recent
KEPT_CUBINS = 16
#: a CUBIN of more instructions than this is kept on its module only
KEPT_INSTRUCTIONS = 500_000
# (sha256 of the CUBIN, nvdisasm's path and version) -> its code, least recently used first
_READ: "OrderedDict[tuple[bytes, str, str], tuple[FunctionCode, ...]]" = held(
    __name__, "_READ", OrderedDict())


def _build(module: Any) -> LineinfoBuild:
    """The module's ``-lineinfo`` build: its tool-run support's, else (a module from another
    process) the module itself where its CUBIN has line information."""
    support = getattr(module, "debug", None)
    if support is not None:
        return support.lineinfo()
    if has_line_info(module.image):
        return LineinfoBuild(b"", "", 0, "cell.cu", True, module.cubin)
    raise LaunchError("this module has no -lineinfo build to annotate (it arrived from another "
                      "process without one): annotate it where it was built")


def _profiles(profile: Any) -> tuple[Profile, ...]:
    """Profiles from what ``profile=`` takes: one, a view of one, a comparison, or several."""
    if profile is None:
        return ()
    record = getattr(profile, "record", profile)
    if isinstance(record, Profile):
        return (record,)
    if isinstance(record, Comparison):
        return record.profiles
    if isinstance(record, Sequence) and not isinstance(record, str):
        return tuple(p for item in record for p in _profiles(item))
    raise ArgumentValueError(f"profile={type(profile).__name__}: give what kernel.profile(...) "
                             "returned, or a list of such profiles")


def _symbols(module: Any, kernel: Any) -> dict[str, str]:
    """symbol -> the name shown, for the kernel asked for (None: every kernel of the module)."""
    kernels = module.kernels
    rows = list(kernels.entries()) if hasattr(kernels, "entries") else \
        [(k.name_expression, k.symbol) for k in kernels.values()]
    every = {row[1]: row[0] for row in rows}
    if kernel is None:
        return every
    symbol = getattr(kernel, "symbol", None)
    if symbol is None:
        try:
            symbol = module[kernel].symbol
        except (KeyError, TypeError):
            raise ArgumentValueError(f"kernel={kernel!r:.80}: the module has no such kernel; it "
                                     f"has {', '.join(sorted(every.values())[:8])}") from None
    return {symbol: every.get(symbol, symbol)}


def annotate_module(module: Any, kernel: Any = None, *, profile: Any = None,
                    instances: "Grouping | str" = Grouping.TOGETHER) -> AnnotatedView:
    """What :meth:`cudamagic.Module.annotate` returns (its docstring says the arguments).

    :raises ArgumentValueError: a kernel the module lacks, a profile that is none, a grouping
        that is neither.
    :raises ToolMissingError: no nvdisasm.
    """
    grouping = Grouping.of(instances)
    profiles = _profiles(profile)
    wanted = _symbols(module, kernel)
    build = _build(module)
    functions = _code(module, build)
    image = read_cubin(build.cubin)
    held = set(image.symbols)
    chosen = [f for f in functions if f.symbol in wanted]
    resources = {f.symbol: image.kernel(f.symbol).resources for f in chosen if f.symbol in held}
    record = annotate(chosen, build.source, line_offset=build.line_offset,
                      program=build.program, names=wanted, resources=resources,
                      profiles=profiles, arch=f"sm_{image.sm}" if image.sm else "",
                      lineinfo=build.lineinfo)
    return AnnotatedView(record, grouping)


def _code(module: Any, build: LineinfoBuild) -> tuple[FunctionCode, ...]:
    """The -lineinfo CUBIN's code: kept on the module, else read once per CUBIN in the process
    (by its bytes: exactly the code of this module's CUBIN)."""
    kept = getattr(module, "_annotated_code", None)
    if kept is not None and kept[0] is build.cubin:
        return kept[1]
    program = tools.require(tools.ToolKind.NVDISASM)
    key = (hashlib.sha256(build.cubin).digest(), program.path, program.version)
    functions = _READ.get(key)
    if functions is None:
        functions = disassemble(build.cubin)
        if sum(len(f.instructions) for f in functions) <= KEPT_INSTRUCTIONS:
            _READ[key] = functions
            while len(_READ) > KEPT_CUBINS:
                _READ.popitem(last=False)
    else:
        _READ.move_to_end(key)
    module._annotated_code = (build.cubin, functions)
    return functions
