"""What this machine offers a build: devices, driver, NVRTC, demangler, cache (``%cuda_info``),
and the per-kernel resources a report shows.

Asking loads the CUDA driver where there is one, never CuPy.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata

from .toolchain import driver
from .errors import ImageError
from .view.records import EnvironmentInfo
from .view.report import BuildReport
from .units import counted, size_text

__all__ = ["gpu_available", "environment_info", "report_with_attributes"]


def gpu_available() -> bool:
    """True when a CUDA driver and at least one GPU are there (kernels can be launched).

    Without one, compiling, caching and name resolution still work; a launch raises
    :class:`~cudamagic.NoDeviceError`.
    """
    return driver.available()


def report_with_attributes(module, report: BuildReport | None = None,
                           limit: int = 64) -> BuildReport:
    """The report (default: the module's) with registers and static shared, local and constant
    memory per kernel, read off the CUBIN (the same numbers the driver reports: the GPU tests
    compare them), so it needs no GPU and loads nothing on one.

    Modules of more than ``limit`` kernels keep their report as it is (the table shows its
    first rows only).
    """
    report = module.report if report is None else report
    if not module.kernels or len(module.kernels) > limit:
        return report
    by_symbol: dict[str, dict[str, int] | None] = {}
    for k in module.kernels.values():
        if k.symbol not in by_symbol:
            try:
                resources = module.image.kernel(k.symbol).resources
            except ImageError:  # a launch says what is wrong; the report shows no numbers
                resources = None
            by_symbol[k.symbol] = None if resources is None else resources.as_dict()
    rows = tuple(dataclasses.replace(r, attributes=by_symbol.get(r.symbol))
                 for r in report.rows)
    return dataclasses.replace(report, rows=rows)


def _debug_fields() -> list[tuple[str, str]]:
    """The debugging tools found (or where they were looked for), and any lost context."""
    from .toolchain import tools

    fields = [(kind.value, tools.find(kind).describe()) for kind in tools.ToolKind]
    for device, code in sorted(driver.lost_contexts().items()):
        fields.append((f"device {device}" if device >= 0 else "context",
                       f"LOST: {driver.lost_text(code, device)}"))
    return fields


def environment_info() -> EnvironmentInfo:
    """What a build uses here: devices, driver, NVRTC, demangler, target arch, cache."""
    from .store import default_cache
    from .toolchain.nvrtc import nvrtc_version
    from .toolchain.demangle import CuFilt, default_demangler
    from .errors import OptionError
    from .pipeline import default_arch

    fields: list[tuple[str, str]] = []
    if driver.available():
        for i in range(driver.device_count()):
            fields.append((f"device {i}", f"{driver.device_name(i)} (sm_{driver.device_sm(i)})"))
        fields.append(("driver", f"CUDA {driver.driver_version()}"))
    else:
        fields.append(("device", "none (compile, cache and name resolution work; launches "
                                 "need a GPU)"))
    fields.append(("NVRTC", nvrtc_version()))
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
    for dist in ("cupy-cuda13x", "cupy-cuda12x", "cuda-bindings", "nvidia-cuda-nvrtc"):
        try:
            fields.append((dist, importlib.metadata.version(dist)))
        except importlib.metadata.PackageNotFoundError:
            pass
    return EnvironmentInfo(tuple(fields))
