"""The project's error hierarchy.

Every error says what went wrong, where, and what to do. In IPython the errors render without a
Python traceback (``_render_traceback_``): the message is the useful part, cudamagic's and the
shell's frames are noise; only the user's own frames are added, where there is more than the
cell's top level (a kernel called inside a helper).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CudaMagicError",
    "LogError",
    "OptionError",
    "SourceError",
    "CompileError",
    "CompileInterrupted",
    "LinkError",
    "ToolchainError",
    "StaleModuleError",
    "NameResolutionError",
    "ImageError",
    "CacheError",
    "CacheArgumentError",
    "LaunchError",
    "NoDeviceError",
    "ContextPoisonedError",
    "ArgumentError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "CudaMagicWarning",
    "CacheWarning",
    "ShadowWarning",
    "InputWarning",
    "DemangleError",
    "DisassemblyError",
    "OccupancyError",
    "ProfileReadError",
    "SanitizerOutputError",
    "ScratchError",
    "ToolMissingError",
]


class CudaMagicError(Exception):
    """Base class of every error cudamagic raises on purpose."""

    def _render_traceback_(self) -> list[str]:
        """Lines IPython shows instead of a traceback: the message, and where the user's own
        code was when the error came through a function of theirs (a kernel called with bad
        arguments inside a helper: without it, nothing says which call). Never raises."""
        try:
            text = str(self)
        except Exception as exc:  # noqa: BLE001 - a subclass whose message fails to make
            text = f"(its message could not be made: {type(exc).__name__})"
        lines = [f"{type(self).__name__}: {line}" if i == 0 else line
                 for i, line in enumerate(text.splitlines() or [""])]
        return lines + _callers(self.__traceback__)


#: the packages whose frames are not the user's: this one, and the shell's that runs a cell
_NOT_THE_USERS = ("cudamagic", "IPython", "ipykernel")


def _callers(tb: object) -> list[str]:
    """The user's frames of a traceback, as Python prints them, where more than the cell's own
    top level is among them (an error raised by a call written in the cell needs none)."""
    import os
    import sys
    import traceback

    if tb is None:
        return []
    try:
        roots = tuple(os.path.dirname(getattr(sys.modules.get(name), "__file__", "") or "")
                      + os.sep for name in _NOT_THE_USERS if name in sys.modules)
        # and Python's own library (a kernel called from a thread pool's worker)
        roots += (os.path.dirname(os.__file__) + os.sep,)
        frames = [f for f in traceback.extract_tb(tb)  # type: ignore[arg-type]
                  if not f.filename.startswith(roots)  # nor a generated launcher's, nor
                  # a magic's, nor generated code (a dataclass's ``<string>`` __init__)
                  and not f.filename.startswith(("<cudamagic", "<decorator-gen-", "<string>",
                                                 "<frozen "))]
        if not frames or (len(frames) == 1 and frames[0].name == "<module>"):
            return []
        shown = "".join(traceback.format_list(frames[-8:])).rstrip("\n").splitlines()
    except Exception:  # noqa: BLE001 - the message is what matters; its frames are a help
        return []
    return ["Where your code was (most recent call last):",
            *(line if len(line) <= 300 else line[:300] + "..." for line in shown)]


class OptionError(CudaMagicError, ValueError):
    """A bad magic line or a bad argument to :func:`cudamagic.build`, or an option NVRTC refused.

    Attributes
    ----------
    refused : tuple of str or None
        Where NVRTC refused one of its options (it does not say which): the options it was
        given, in order. None for a line or argument cudamagic refused itself.
    """

    def __init__(self, *args: object, refused: tuple[str, ...] | None = None) -> None:
        super().__init__(*args)
        self.refused = refused


class SourceError(CudaMagicError, ValueError):
    """Source text that cannot be handed to NVRTC (empty, NUL bytes, not valid UTF-8)."""


@dataclass(frozen=True)
class LogError:
    """One error in a compile's log, by where it is: the cell line it names (``line``, in the
    log's own numbering) or the name expression it belongs to (``expression``)."""

    line: int | None = None
    expression: str | None = None


class CompileError(CudaMagicError):
    """NVRTC refused the source.

    Attributes
    ----------
    log : str
        NVRTC's log, rewritten to the cell's own line numbers where it could be.
    errors : tuple of LogError
        Its errors by place, in the log's order (what code decides by; the message and
        ``log`` are for people).
    """

    def __init__(self, message: str, log: str = "", errors: tuple[LogError, ...] = ()) -> None:
        super().__init__(message)
        self.log = log
        self.errors = errors


class CompileInterrupted(KeyboardInterrupt):
    """Ctrl-C came during a build; the build ran to its end (a compile cannot be stopped half
    way) and the message says what was kept. A KeyboardInterrupt, so code that stops on Ctrl-C
    stops; in IPython one block, as every cudamagic error, not a traceback quoting the cell."""

    _render_traceback_ = CudaMagicError._render_traceback_


class LinkError(CompileError):
    """nvJitLink could not link relocatable device code, LTO IR or PTX into a CUBIN (or is not
    installed); ``log`` is its error log."""


class ToolchainError(CudaMagicError):
    """The compiler or the linker failed for a reason outside the cell's code (a process forked
    while its parent compiled, a temporary folder it cannot write): the cell itself may be fine,
    and the message says what to change instead."""


class StaleModuleError(CudaMagicError):
    """A later build of a module (its ``-lineinfo`` build, which ``annotate``, ``sanitize`` and
    ``profile`` use) cannot compile what the module was built from: a header it read changed
    since, or the working folder it read headers from is another. The message names what
    changed; re-running the cell builds the module from the files as they are now."""


class NameResolutionError(CudaMagicError, KeyError):
    """A name expression that names no kernel, or names more than one. A KeyError, as a
    Mapping's missing key is (a module is one: ``except KeyError`` catches it)."""

    def __str__(self) -> str:  # KeyError would quote the message like a dict key
        return str(self.args[0]) if self.args else ""


class ImageError(CudaMagicError):
    """A CUBIN that cannot be read (not an ELF file for a CUDA device, or truncated)."""


class CacheError(CudaMagicError):
    """The on-disk cache cannot be used as asked."""


class CacheArgumentError(CacheError, ValueError):
    """A value the cache cannot use: a size limit that is not a size or would keep nothing, a
    ``cache`` argument that is neither a cache nor a folder, a record put under a key it does not
    name. The message says what would work."""


class LaunchError(CudaMagicError):
    """A kernel launch that failed or was refused before it reached the GPU."""


class NoDeviceError(LaunchError):
    """No CUDA device or driver is available for a launch."""


class ForkedCudaError(NoDeviceError):
    """CUDA cannot be used in this process: it is a child forked after CUDA started in its
    parent. Builds and cache hits still work; a launch needs a process started with
    ``multiprocessing``'s ``spawn`` or ``forkserver`` method."""


class ContextPoisonedError(LaunchError):
    """A kernel faulted; the CUDA context of this process can no longer be used.

    Attributes
    ----------
    code : int or None
        The sticky error's number (``CUresult``, the same as the runtime's ``cudaError_t``).
    device : int or None
        The device whose context is lost (-1: not known).
    repeated : bool
        The loss was explained in full by an earlier error; this one says it short.
    """

    def __init__(self, message: str, code: int | None = None, device: int | None = None,
                 repeated: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.device = device
        self.repeated = repeated


class ArgumentError(LaunchError):
    """A kernel argument, launch dimension, shared memory size or stream that the launch cannot
    take; raised before anything reaches the GPU (so also without one). The message names the
    kernel and the parameter and says what to pass instead."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of a kind the parameter cannot take (a float for an ``int``, a host array for a
    pointer, a stream that is no stream)."""


class ArgumentValueError(ArgumentError, ValueError):
    """An argument of the right kind whose value does not fit (``2**40`` for an ``int``, a data
    pointer outside the address space, a negative ``shared_mem``)."""


class CudaMagicWarning(UserWarning):
    """Base class of cudamagic's warnings: something worked, but not quite as asked."""


class CacheWarning(CudaMagicWarning):
    """The cache folder cannot be used; the cache is in memory for this process."""


class ShadowWarning(CudaMagicWarning):
    """A kernel's Python name replaced a user variable or hid a builtin."""


class InputWarning(CudaMagicWarning):
    """A cell or magic line that works but is probably not what was meant."""


class DemangleError(CudaMagicError, RuntimeError):
    """A demangler process that failed or printed something other than one line per name."""


class OccupancyError(CudaMagicError, ValueError):
    """An occupancy question that cannot be answered: an architecture without a limits table, a
    block size or shared memory size that is not one."""


class ProfileReadError(CudaMagicError):
    """ncu's report could not be read (no report interface, or not a report of one launch)."""


class SanitizerOutputError(CudaMagicError):
    """compute-sanitizer's report could not be read (not its XML, or truncated)."""


class DisassemblyError(CudaMagicError):
    """nvdisasm could not read the CUBIN (the message holds its own words)."""


class ScratchError(CudaMagicError):
    """No private folder could be made for a tool run's files."""


class ToolMissingError(CudaMagicError):
    """A debugging tool that is not installed; the message says how to install it."""
