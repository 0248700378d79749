"""A kernel's attributes under cudamagic's names and under CuPy's (``RawKernel.attributes``,
``RawKernel.num_regs``...), so code ported from CuPy reads the same keys.

CuPy's names are those of the driver's ``CU_FUNC_ATTRIBUTE_*`` in lower case, shortened as
CuPy's ``RawKernel`` spells them; each is an alias of one value cudamagic already reads, from
the CUBIN without a GPU, from the driver with one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["KernelAttributes", "CUPY_NAMES", "DEVICE_ONLY"]

#: CuPy's name -> cudamagic's name of the same value
CUPY_NAMES: dict[str, str] = {
    "num_regs": "registers",
    "shared_size_bytes": "static_shared_bytes",
    "const_size_bytes": "const_bytes",
    "local_size_bytes": "local_bytes",
    "max_threads_per_block": "max_threads_per_block",
    "max_dynamic_shared_size_bytes": "max_dynamic_shared_bytes",
    "binary_version": "binary_version",
    "ptx_version": "ptx_version",
    "cache_mode_ca": "cache_mode_ca",
    "preferred_shared_memory_carveout": "preferred_shared_memory_carveout",
}

#: Values only the driver knows, for one device: absent without a GPU
DEVICE_ONLY = ("max_threads_per_block", "max_dynamic_shared_bytes", "ptx_version",
               "cache_mode_ca", "preferred_shared_memory_carveout")


class KernelAttributes(dict):
    """``kernel.attributes``: a dict of the kernel's attributes (cudamagic's names and CuPy's,
    each the same number), for the current device or, without a GPU, from the CUBIN.

    Calling it, ``kernel.attributes(device)``, gives the same for another device (and is how
    earlier cudamagic code asked: ``kernel.attributes()``).
    """

    def __init__(self, values: dict[str, int],
                 for_device: Callable[[int | None], KernelAttributes]) -> None:
        super().__init__(values)
        for cupy_name, own in CUPY_NAMES.items():
            if own in values:
                self[cupy_name] = values[own]
        self._for_device = for_device

    def __call__(self, device: int | None = None) -> KernelAttributes:
        return self if device is None else self._for_device(device)

    def __reduce__(self) -> Any:  # a plain dict once it leaves the process
        return (dict, (dict(self),))
