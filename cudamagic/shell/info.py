"""What this machine offers a build: devices, driver, NVRTC, demangler, cache (``%cuda_info``).
The per-kernel resources a report shows are :func:`cudamagic.view.widget.report_with_attributes`.

Asking loads the CUDA driver where there is one, never CuPy.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..toolchain.device import driver
from ..core.units import counted, size_text

if TYPE_CHECKING:  # pragma: no cover  (%cuda_info's record: a cell's report needs none)
    from ..view.records import EnvironmentInfo

__all__ = ["gpu_available", "environment_info"]


def gpu_available() -> bool:
    """True when a CUDA driver and at least one GPU are there (kernels can be launched).

    Without one, compiling, caching and name resolution still work; a launch raises
    :class:`~cudamagic.NoDeviceError`.
    """
    return driver.available()


def _debug_fields() -> list[tuple[str, str]]:
    """The debugging tools found (or where they were looked for), and any lost context."""
    from ..toolchain.tools import tools

    fields = [(kind.value, tools.find(kind).describe()) for kind in tools.ToolKind]
    for device, code in sorted(driver.lost_contexts().items()):
        fields.append((f"device {device}" if device >= 0 else "context",
                       f"LOST: {driver.lost_text(code, device)}"))
    return fields


def environment_info() -> EnvironmentInfo:
    """What a build uses here: devices, driver, NVRTC, demangler, target arch, cache. Where
    NVRTC is not installed, the report says so (and how to install it) instead of raising."""
    import importlib.metadata

    from ..view.records import EnvironmentInfo
    from ..store import default_cache
    from ..toolchain.compile.nvrtc import nvrtc_version
    from ..toolchain.binary.demangle import CuFilt, default_demangler
    from ..errors import OptionError, ToolchainError
    from ..pipeline.steps import default_arch

    fields: list[tuple[str, str]] = []
    if driver.available():
        for i in range(driver.device_count()):
            fields.append((f"device {i}", f"{driver.device_name(i)} (sm_{driver.device_sm(i)})"))
        fields.append(("driver", f"CUDA {driver.driver_version()}"))
    else:
        fields.append(("device", "none (compile, cache and name resolution work; launches "
                                 "need a GPU)"))
    from ..pipeline.steps import SERVED
    served = SERVED.facts()  # where a server compiles, NVRTC is its (never loaded here)
    try:
        fields.append(("NVRTC", served.nvrtc_version if served else nvrtc_version()))
        pch = pch_state(served)
    except ToolchainError as exc:  # no NVRTC here (no cuda.bindings): said, the rest still is
        fields.append(("NVRTC", f"missing: {exc}"))
        pch = "none without NVRTC"
    fields.append(("compile server", server_text(SERVED.status())))
    fields.append(("precompiled headers", pch))
    d = default_demangler()
    fields.append(("demangler", f"{d.name} ({d.path})" if isinstance(d, CuFilt) else d.name))
    try:
        fields.append(("arch in use", default_arch()))
    except OptionError as exc:
        fields.append(("arch in use", str(exc)))
    fields += _debug_fields()
    cache = default_cache()
    n = len(cache)
    fields.append(("cache", f"{cache.location} ({counted(n, 'entry', 'entries')}, "
                            f"{size_text(cache.volume())} of {size_text(cache.size_limit)})"))
    fields.append(("CUTLASS", cutlass_state()))
    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cuda-bindings", "nvidia-cuda-nvrtc"):
        try:
            fields.append((dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            pass
    return EnvironmentInfo(tuple(fields))


def server_text(facts: Any) -> str:
    """Whether a compile server serves this notebook, in words (``%cuda_info``,
    ``%cuda_cache server``); ``facts``: its facts, None where none serves."""
    from ..compiler.wire import SERVER_ENV

    if facts is None:
        return (f"none: NVRTC compiles in this process (${SERVER_ENV}=1 starts one on the next "
                "miss)" if os.environ.get(SERVER_ENV, "") in ("", "0") else
                "none serves now (one starts on the next miss)")
    up = time.time() - facts.started
    return (f"pid {facts.pid}, up {up:.0f} s, {counted(facts.served, 'compile')} served, "
            f"NVRTC {facts.nvrtc_version}; %cuda_cache server stop ends it")


def pch_state(served: Any = None) -> str:
    """Whether a miss may start from a precompiled header here, in words (``%cuda_info``);
    ``served``: the compile server's facts, where one compiles."""
    from ..toolchain.compile import pch
    from ..toolchain.compile.nvrtc import nvrtc_version

    if not (served.pch_supported if served else pch.supported()):
        version = served.nvrtc_version if served else nvrtc_version()
        return f"not supported by NVRTC {version} (12.8 and later make them)"
    if pch.switched_off():
        return f"supported; off (${pch.PCH_ENV}={os.environ.get(pch.PCH_ENV)})"
    return "supported, on (kept in the cache folder's pch/ folder; --no-pch turns it off)"


def cutlass_state() -> str:
    """Which CUTLASS (and CuTe) a cell that includes it gets, and where, in words
    (``%cuda_info``; an ``-I`` folder of a cell's own that holds CUTLASS comes first)."""
    from ..errors import OptionError
    from ..core.libraries import CUTLASS_ENV, cutlass

    try:
        found = cutlass()
    except OptionError as exc:
        return str(exc)
    if found is None:
        return (f"not found (pip install nvidia-cutlass, or set ${CUTLASS_ENV} to a CUTLASS "
                "checkout)")
    return found.describe()
