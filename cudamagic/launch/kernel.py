"""One kernel as a Python callable: its parameter table, the launch, and where it lives.

How an argument reaches a parameter is decided in one table (:mod:`.params`), read by the checked
path (:mod:`.encode`) and by the launcher generated per kernel (:mod:`.launcher`); launches the
plain ``cuLaunchKernel`` cannot make (cooperative, clusters) are :mod:`.extended`'s.
"""

from __future__ import annotations

import sys
import threading
import types
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.forksafe import ForkSafeLock, once
from ..core.process import at_fork
from ..cxx import Signatures, tidy_name, with_void
from ..cxx.resolve import ResolvedBy
from ..errors import ContextPoisonedError, LaunchError, NoDeviceError
from ..toolchain.device import driver
from ..toolchain.binary.image import KernelImage, KernelResources, LaunchNeeds

if TYPE_CHECKING:  # pragma: no cover  (the launch's modules: imported by the first call)
    from .attributes import KernelAttributes
    from .launcher import Launcher, LaunchHooks
    from .params import ParamSpec

__all__ = ["Kernel", "KernelTools"]

_get_ident = threading.get_ident
# guards a kernel's first handle per device and its first launcher; one for every kernel (each
# is held for a dictionary update), so that a restore of 1000 kernels makes no lock per kernel
_SETUP = ForkSafeLock()

# the kernels that hold a handle or a launcher: what the driver and CuPy gave them in a parent
# is nothing in a forked child (tests/test_fork_cuda.py)
_launched: "weakref.WeakSet[Kernel]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child's kernels start as unlaunched: their handles and their launchers (which
    hold CuPy's current-device call, an error of CuPy's in such a child) are dropped, so a
    launch here asks the driver again, which says why it cannot (ForkedCudaError)."""
    for kernel in list(_launched):
        kernel._handles.clear()
        kernel._shared_limit.clear()
        kernel._launchers.clear()
        kernel.__call__ = kernel._any_thread
    _launched.clear()


at_fork(__name__, "_launched", after_in_child=_after_fork_in_child)


@dataclass(frozen=True)
class KernelTools:
    """What a kernel's tools need from the layers above launch, given to each kernel by whoever
    makes it (:class:`cudamagic.pipeline.module.KernelTable`): the launch layer times and sizes kernels
    but neither builds nor words a result.

    Attributes
    ----------
    bench : callable or None
        ``bench(kernel, grid, block, args, **options)``: :meth:`Kernel.bench`'s result, shown.
    occupancy : callable or None
        ``occupancy(kernel, block_sizes, dynamic_shared, **options)``: :meth:`Kernel.occupancy`'s
        table, shown.
    """

    bench: Callable[..., Any] | None = None
    occupancy: Callable[..., Any] | None = None


#: a kernel made on its own (no module): no tools
NO_TOOLS = KernelTools()


class Kernel:
    """A kernel of a built module, callable as ``kernel(grid, block, args, shared_mem=0,
    stream=None, cluster=None, cooperative=None)``.

    A call launches it asynchronously on ``stream`` (CuPy's current one by default), with
    ``shared_mem`` bytes of dynamic shared memory; ``cluster=(x, y, z)`` launches it in
    thread-block clusters (sm_90 and newer). A kernel whose CUBIN says it synchronises its whole
    grid is launched cooperatively (``cooperative=False`` overrides that; ``True`` asks for it).

    :raises ArgumentTypeError, ArgumentValueError: an argument, dimension, ``shared_mem``,
        ``stream`` or ``cluster`` that does not fit (checked before the launch, no GPU needed).
    :raises NoDeviceError: no CUDA device is available.
    :raises ContextPoisonedError: the context is unusable after a kernel fault.
    :raises LaunchError: a cooperative grid larger than the device holds at once, or the
        driver refused the launch.

    ``__call__`` is a slot of each kernel, not a method: it holds the launcher generated for the
    kernel's first launching thread (bound to the kernel), so a launch is one Python call into
    generated code; Python looks ``__call__`` up on the type, and the slot there reads the
    kernel's own. Before the first launch, and for other threads, it is :meth:`_any_thread`.

    Attributes
    ----------
    name_expression : str
        The user's exact string (or the plain name of an ``extern "C"`` kernel).
    symbol : str
        The mangled name in the CUBIN.
    python_name : str
        The identifier it is pushed under in the notebook.
    signature : str
        The demangled signature (the symbol itself where that was too long to keep).
    name_too_long : bool
        Whether the demangled name was too long to keep (a report says so in words).
    resolved_by : ResolvedBy
        How its symbol was found (:class:`cudamagic.cxx.resolve.ResolvedBy`; equal to its
        word): ``"nvrtc"``, ``"stored"``, ``"stored-unverified"``, ``"demangled"`` or
        ``"extern-c"``.
    params : tuple of ParamSpec or None
        The parameter table.
    resources : KernelResources or None
        Registers, shared, constant and local memory, as the CUBIN records them.
    binary : Binary
        The loaded CUBIN the kernel is in (anything with ``library()``).
    module : Module or None
        The module the kernel belongs to (set by the module that takes it; it travels with a
        pickled kernel); None for a kernel made on its own.
    tools : KernelTools
        What :meth:`bench` and :meth:`occupancy` run, given by the kernel's maker.
    """

    __slots__ = ("__call__", "__dict__", "__weakref__")

    def __init__(self, binary: Any, name_expression: str, symbol: str, python_name: str,
                 signatures: Signatures, resolved_by: ResolvedBy,
                 image: KernelImage | None = None, *, tools: KernelTools = NO_TOOLS) -> None:
        # a restore makes one per name expression: only what a call needs at once is set here,
        # the rest (signature, CUBIN records, parameter table) is read on first use
        self.binary = binary
        self.module: Any = None
        self.__call__ = self._any_thread
        self.name_expression = name_expression
        self.symbol = symbol
        self.python_name = python_name
        # what function tools read (cupyx.profiler.benchmark names its report by it)
        self.__name__ = self.__qualname__ = python_name
        self.resolved_by = resolved_by
        self._signatures = signatures
        self.tools = tools
        if image is not None:  # else read from the binary's CUBIN on first use
            self.__dict__["image"] = image
        self._handles: dict[int, int] = {}  # device -> CUkernel (launches take it as it is)
        self._shared_limit: dict[int, int] = {}
        self._launchers: dict[int, Launcher] = {}  # by thread

    @once
    def signature(self) -> str:
        """The signature with its ``void`` return, as the build's report shows it
        (``void fill(float*, float, int)``; the symbol itself where the demangled name was too
        long to keep): concrete types where the demangler named template parameters ``T1``...
        (cu++filt's; libstdc++'s demangling in this process gives them, as for the report's
        row), library-internal namespaces left out."""
        if self.name_too_long:
            return self.demangled
        text = self.demangled
        if "(" not in text:  # extern "C": the CUBIN's sizes, as the report's row shows them
            from ..cxx.display import plain_signature
            from ..errors import ImageError

            try:
                params = self.image.params
            except ImageError:
                params = None
            return plain_signature(text, None if params is None else
                                   tuple(p.size for p in params))
        if self._signatures.placeholders:
            from ..toolchain.binary.demangle import concrete_text

            text = concrete_text(self.symbol) or text
        return with_void(tidy_name(text) if "(" in text else text)

    @property
    def demangled(self) -> str:
        """The demangled name as the demangler gave it (what a travelling module carries)."""
        return self._signatures.text(self.symbol)

    @property
    def name_too_long(self) -> bool:
        """Whether the demangled name was too long to keep."""
        return self.symbol in self._signatures.too_long

    @once
    def image(self) -> KernelImage:
        """The kernel's records in its binary's CUBIN (one object per symbol: the image
        hands every thread the same)."""
        return self.binary.image.kernel(self.symbol)

    @once
    def params(self) -> tuple[ParamSpec, ...] | None:
        """The parameter table (read from the CUBIN and the signature on first use, so a restore
        of many kernels parses only those that are called)."""
        from .params import param_specs

        declared = getattr(self.binary, "declared", None) or {}
        return param_specs(self.image, self._signatures[self.symbol], declared.get(self.symbol))

    @property
    def launch_needs(self) -> LaunchNeeds:
        """How the kernel must be launched, as its PTX and CUBIN say: grid-wide sync (launched
        cooperatively), compile-time clusters (no GPU)."""
        return getattr(self.image, "launch", None) or LaunchNeeds()

    @property
    def prints(self) -> bool:
        """The kernel (or a function it calls) calls ``printf``: its CUBIN's call graph reaches
        ``vprintf`` (no GPU)."""
        return bool(getattr(self.image, "prints", False))

    @property
    def resources(self) -> KernelResources | None:
        """Registers, shared, constant and local memory as the CUBIN records them (no GPU)."""
        return self.image.resources

    @property
    def dynamic_shared_default(self) -> int:
        """Dynamic shared memory a launch may take before the kernel's limit must be raised: the
        driver's default of 48 KiB per block counts the static ``__shared__`` arrays too."""
        from .launcher import SHARED_PER_BLOCK_DEFAULT

        static = self.resources.static_shared_bytes if self.resources is not None else 0
        return max(SHARED_PER_BLOCK_DEFAULT - static, 0)

    def __repr__(self) -> str:
        return (f"<cudamagic.Kernel {self.name_expression!r} symbol={self.symbol!r} "
                f"resolved_by={self.resolved_by!r}>")

    def _handle(self, device: int, context_ready: bool = False) -> int:
        handle = self._handles.get(device)
        if handle is None:
            if not context_ready:
                driver.ensure_context(device)
            library = self.binary.library()  # its own lock: loaded once per process
            with _SETUP:
                handle = self._handles.get(device)
                if handle is None:
                    handle = self._handles[device] = library.kernel(self.symbol)
                    _launched.add(self)
        return handle

    def function(self, device: int | None = None, context_ready: bool = False) -> int:
        """The kernel's ``CUfunction`` in a device's context, loading the module there if needed."""
        device = driver.current_device() if device is None else device
        return driver.kernel_function(self._handle(device, context_ready))

    @property
    def attributes(self) -> "KernelAttributes":
        """Registers, static shared, local and constant memory, the binary's architecture (and,
        from the driver, the largest block, dynamic shared memory, the PTX version, the cache
        mode and the carveout), under cudamagic's names and CuPy's (``num_regs``,
        ``shared_size_bytes``, ``const_size_bytes``, ``local_size_bytes``, ``binary_version``,
        ``max_threads_per_block``...): a dict, also callable as ``attributes(device)``.

        With a GPU these are the driver's numbers for the device (default: the current one).
        Without one, ``registers``, ``static_shared_bytes``, ``const_bytes``, ``local_bytes``
        and ``binary_version`` come from the CUBIN (:attr:`resources`; the driver reads the same
        records), and those that depend on the device (:data:`~.attributes.DEVICE_ONLY`) are
        absent.

        :raises NoDeviceError: no GPU, and a kernel made without its CUBIN.
        """
        return self._attributes(None)

    def _attributes(self, device: int | None) -> "KernelAttributes":
        from .attributes import KernelAttributes  # asked of a kernel: not a hit's import

        if device is None and not driver.available():
            if self.resources is None:
                raise NoDeviceError(f"{self.name_expression}: no CUDA device, and no CUBIN "
                                    "records to read the attributes from")
            values = self.resources.as_dict()
            sm = getattr(getattr(self.binary, "image", None), "sm", None)
            if sm is not None:
                values["binary_version"] = sm
            return KernelAttributes(values, self._attributes)
        device = driver.current_device() if device is None else device
        return KernelAttributes(driver.kernel_attributes(self._handle(device), device),
                                self._attributes)

    def _attribute(self, cupy_name: str) -> int:
        from .attributes import CUPY_NAMES

        attributes = self.attributes
        if cupy_name not in attributes:
            raise NoDeviceError(f"{self.name_expression}: {cupy_name} depends on the device: "
                                "the driver gives it where a GPU is (without one, the CUBIN "
                                f"gives {', '.join(sorted(set(attributes) & set(CUPY_NAMES)))})")
        return attributes[cupy_name]

    @property
    def name(self) -> str:
        """The name the kernel was asked for by (CuPy's ``RawKernel.name``): the name expression,
        or an ``extern "C"`` kernel's plain name."""
        return self.name_expression

    num_regs = property(lambda self: self._attribute("num_regs"),
                        doc="Registers per thread (CuPy's name).")
    max_threads_per_block = property(lambda self: self._attribute("max_threads_per_block"),
                                     doc="The largest block the device launches (a GPU's).")
    shared_size_bytes = property(lambda self: self._attribute("shared_size_bytes"),
                                 doc="Static shared memory per block (CuPy's name).")
    const_size_bytes = property(lambda self: self._attribute("const_size_bytes"),
                                doc="Constant memory (CuPy's name).")
    local_size_bytes = property(lambda self: self._attribute("local_size_bytes"),
                                doc="Local memory per thread (CuPy's name).")
    binary_version = property(lambda self: self._attribute("binary_version"),
                              doc="The CUBIN's architecture, 10 * major + minor (90: sm_90).")
    ptx_version = property(lambda self: self._attribute("ptx_version"),
                           doc="The virtual architecture it was compiled for (a GPU's answer).")
    max_dynamic_shared_size_bytes = property(
        lambda self: self._attribute("max_dynamic_shared_size_bytes"),
        doc="Dynamic shared memory a launch may take (a GPU's answer).")
    preferred_shared_memory_carveout = property(
        lambda self: self._attribute("preferred_shared_memory_carveout"),
        doc="The shared memory carveout asked for, in percent (a GPU's answer).")
    cache_mode_ca = property(lambda self: self._attribute("cache_mode_ca"),
                             doc="1 where it was compiled with -Xptxas --dlcm=ca (a GPU's answer).")

    def bench(self, grid: Any, block: Any, args: Sequence[Any] = (), shared_mem: int = 0,
              stream: Any = None, **options: Any) -> Any:
        """Time this launch on the GPU with CUDA events (:func:`cudamagic.launch.bench.bench`:
        ``repeat``, ``budget_s``, ``warmup``, ``flush_l2``, ``bytes``, ``flops``), through the
        kernel's :class:`KernelTools`.

        :raises NoDeviceError: no GPU.
        :raises LaunchError: a kernel made outside a module (it has no tools).
        """
        return self._tool(self.tools.bench, "bench")(self, grid, block, args,
                                                     shared_mem=shared_mem, stream=stream,
                                                     **options)

    def occupancy(self, block_sizes: Sequence[int] | None = None,
                  dynamic_shared: Sequence[int] = (0,), **options: Any) -> Any:
        """Blocks per SM against block size (:func:`cudamagic.toolchain.device.occupancy.table`: the
        driver's answer on a GPU, computed from the CUBIN without one; ``sm``, ``carveout``),
        through the kernel's :class:`KernelTools`.

        :raises LaunchError: a kernel made outside a module (it has no tools).
        """
        return self._tool(self.tools.occupancy, "occupancy")(self, block_sizes, dynamic_shared,
                                                             **options)

    def _tool(self, tool: Callable[..., Any] | None, what: str) -> Callable[..., Any]:
        if tool is None:
            raise LaunchError(f"{self.name_expression}: kernel.{what}() needs a kernel of a "
                              f"module (cudamagic.build, %%cuda); this one was made on its own: "
                              f"call cudamagic.launch.bench.bench or "
                              f"cudamagic.toolchain.device.occupancy.table with it")
        return tool

    def sanitize(self, grid: Any, block: Any, args: Sequence[Any] = (), tool: str = "memcheck",
                 **launch_options: Any) -> Any:
        """Run this launch once in a child process under compute-sanitizer (``memcheck``,
        ``racecheck``, ``initcheck`` or ``synccheck``); the notebook's arrays are copied, never
        written, and its context never runs the kernel (:func:`cudamagic.launch.tool_run.
        sanitize`: ``shared_mem``, ``uninitialized=(i, ...)`` leaves array i fresh for
        initcheck). Returns the findings, each at its cell line.

        :raises ArgumentError: a bad argument or tool (checked first).
        :raises NoDeviceError: no GPU.
        """
        from .tool_run import sanitize

        return sanitize(self, grid, block, args, tool, **launch_options)

    def profile(self, grid: Any, block: Any, args: Sequence[Any] = (),
                **launch_options: Any) -> Any:
        """Run this launch once in a child process under Nsight Compute (``ncu``) and return
        its figures: duration, throughput, DRAM traffic, occupancy, stall reasons, hot lines.

        :raises ArgumentError: a bad argument (checked first).
        :raises NoDeviceError: no GPU.
        :raises ToolMissingError: no ncu (the message says how to install it).
        """
        from .tool_run import profile

        return profile(self, grid, block, args, **launch_options)

    def _any_thread(self, grid: Any, block: Any, args: Sequence[Any] = (),
                    shared_mem: int = 0, stream: Any = None, cluster: Any = None,
                    cooperative: Any = None) -> None:
        """A launch through the calling thread's launcher (made on its first launch)."""
        launcher = self._launchers.get(_get_ident())
        if launcher is None:
            launcher = self._make_launcher(args, (_length(grid), _length(block)))
        launcher.run(self, grid, block, args, shared_mem, stream, cluster, cooperative)

    def _make_launcher(self, sample: Any, shape: tuple[int, int] = (1, 1)) -> Launcher:
        """This thread's launcher (its own parameter buffer: threads launch concurrently);
        ``sample``, the first call's arguments, picks how ``extern "C"`` slots are packed.

        The first one made becomes the kernel's own ``__call__`` (bound to it): calling the
        kernel then runs the generated launcher directly, one Python call instead of three on
        the one hot path; other threads are sent on to theirs.
        """
        if self.params is None:
            raise LaunchError(f"{self.name_expression}: the CUBIN carries no parameter records "
                              f"for {self.symbol}; cudamagic cannot pack its arguments safely")
        from .launcher import generate_launcher

        sample = sample if isinstance(sample, (tuple, list)) else ()
        launcher = generate_launcher(self.name_expression, self.params, self._launch_hooks(),
                                     sample, shape, self.launch_needs, self.prints)
        with _SETUP:
            first = not self._launchers
            # by thread: a thread id reused after a thread ends takes over a dead thread's buffer
            self._launchers[_get_ident()] = launcher
            _launched.add(self)
            if first:
                self.__call__ = types.MethodType(launcher.run, self)
        return launcher

    def __reduce__(self):
        """A kernel travels with its module (pickled once however many of its kernels go
        along, as the module's checksummed record) and is found by its name expression on
        arrival: see :meth:`cudamagic.Module.__reduce__`."""
        if self.module is None:
            raise TypeError(f"{self.name_expression}: a kernel made outside a module cannot be "
                            "pickled")
        return _kernel_of, (self.module, self.name_expression)

    def _launch_hooks(self) -> LaunchHooks:
        """The device side of a launch: CuPy's types and calls where CuPy is imported (its typed
        ``cuLaunchKernel`` binding is the cheapest from Python), the driver module's otherwise."""
        from .launcher import LaunchHooks, NoSuchType, NullStream

        cupy = sys.modules.get("cupy")
        fast = "cupy_backends.cuda.api.driver" in sys.modules
        return LaunchHooks(
            array_type=cupy.ndarray if cupy is not None else NoSuchType,
            stream_type=cupy.cuda.Stream if cupy is not None else NoSuchType,
            current_device=driver.device_getter(),
            current_stream=cupy.cuda.get_current_stream if cupy is not None
            else NullStream,
            handles=self._handles, load=self._handle,
            launch=driver.fast_launch() if fast else None,
            relaunch=self._relaunch, raise_shared_limit=self.raise_shared_limit,
            other_thread=Kernel._any_thread, dynamic_shared_default=self.dynamic_shared_default)

    def _relaunch(self, fn: int, device: int, grid: tuple[int, int, int],
                  block: tuple[int, int, int], shared_mem: int, stream: int) -> None:
        """The checked launch after a fast one raised: nothing was launched, so a thread without
        a context gets one and a retry, and anything else the error that says what went wrong."""
        launcher = self._launchers[_get_ident()]
        try:
            driver.launch(fn, grid, block, shared_mem, stream, launcher.address, device=device,
                          what=f"launching {self.name_expression}")
        except ContextPoisonedError as exc:  # the fault was an earlier launch's, likely the last
            if exc.repeated:
                raise
            from .launcher import LAST_LAUNCH
            from .tool_run import sanitize_hint

            raise ContextPoisonedError(f"{exc} {sanitize_hint(LAST_LAUNCH[0])}", exc.code,
                                       exc.device) from None

    def raise_shared_limit(self, device: int, nbytes: int) -> None:
        if self._shared_limit.get(device, 0) < nbytes:
            driver.set_max_dynamic_shared(self._handle(device), device, nbytes)
            self._shared_limit[device] = nbytes


def _length(dims: Any) -> int:
    """How many dimensions a grid or block has (1 for an int or anything odd)."""
    return len(dims) if isinstance(dims, (tuple, list)) else 1


def _kernel_of(module: Any, label: str) -> Kernel:
    """A kernel of an arrived module, by its name expression (:meth:`Kernel.__reduce__`)."""
    return module.kernels[label]
