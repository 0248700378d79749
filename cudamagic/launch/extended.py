"""Launches ``cuLaunchKernel`` cannot make: cooperative (grid-wide sync) and thread-block clusters.

A kernel that synchronises its whole grid (``cooperative_groups::this_grid().sync()``) must be
launched cooperatively, and then every block of the grid must be resident at once. Its CUBIN says
so (:class:`~cudamagic.toolchain.binary.image.LaunchNeeds`, read without a GPU), so such a kernel is launched
cooperatively without being asked, and a grid larger than the device holds at once is refused
before the launch with the numbers (the driver's occupancy for this block size and shared memory,
times the SMs) instead of the driver's ``CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE``. Clusters
(``cluster=(2, 1, 1)``, sm_90 and newer) and kernels compiled with ``__cluster_dims__`` have their
grid checked against the cluster shape the same way. Both go through ``cuLaunchKernelEx`` with
the launch attributes; an ordinary kernel launched without ``cluster``/``cooperative`` never
comes here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..errors import ArgumentTypeError, ArgumentValueError, LaunchError
from ..toolchain.device.driver import ExtendedLaunch
from ..toolchain.binary.image import LaunchNeeds
from .encode import show, check_dims

__all__ = ["always_extended", "check_extended", "cluster_error", "co_residency_error",
           "launch_extended"]

Dims = tuple[int, int, int]


def always_extended(needs: LaunchNeeds) -> bool:
    """Whether every launch of a kernel takes ``cuLaunchKernelEx`` (its CUBIN says it syncs its
    grid or was compiled for clusters), not only the calls that ask for it."""
    return bool(needs.grid_sync) or needs.requires_cluster or needs.cluster_dims is not None


def check_extended(name: str, cluster: Any, cooperative: Any, grid: Dims | None = None,
                   needs: LaunchNeeds = LaunchNeeds()) -> tuple[Dims | None, bool | None]:
    """A call's ``cluster`` (None, or 1 to 3 ints, each at least 1, that divide ``grid``) and
    ``cooperative`` (None, True or False), checked before the device is asked, against what
    the CUBIN says of the kernel's clusters (``needs``) too: without a GPU a bad cluster is
    said as such, not as no device.

    :raises ArgumentTypeError, ArgumentValueError: anything else.
    """
    if cooperative is not None and type(cooperative) is not bool:
        raise ArgumentTypeError(f"{name}: cooperative must be True, False or None (as the "
                                f"CUBIN says), got {type(cooperative).__name__} "
                                f"{show(cooperative)}")
    dims = None if cluster is None else check_dims(name, "cluster", cluster)
    if grid is not None:
        error = cluster_error(name, needs, grid, dims)
        if error is not None:
            raise error
    return dims, cooperative


def cluster_error(name: str, needs: LaunchNeeds, grid: Dims, cluster: Dims | None
                  ) -> ArgumentValueError | None:
    """Why the CUBIN's clusters refuse this grid and the call's ``cluster`` (checked), or None:
    another shape than the kernel's ``__cluster_dims__``, none for a ``__cluster_dims__()``
    kernel, or a grid that is no whole number of the clusters it launches in."""
    compiled = needs.cluster_dims
    if cluster is not None and compiled is not None and cluster != compiled:
        return ArgumentValueError(f"{name}: cluster={cluster}, but the kernel was compiled with "
                                  f"__cluster_dims__{compiled}: leave cluster out, or pass "
                                  f"{compiled}")
    if cluster is None and compiled is None and needs.requires_cluster:
        return ArgumentValueError(f"{name}: the kernel was compiled with __cluster_dims__() and "
                                  "no shape: launch it with cluster=(x, y, z)")
    shape = cluster or compiled
    if shape is None:
        return None
    return _cluster_error(name, grid, shape, "the call's cluster" if cluster
                          else "its __cluster_dims__")


def co_residency_error(name: str, grid: Dims, block: Dims, shared_mem: int, per_sm: int,
                       sms: int, device: str) -> LaunchError | None:
    """Why a cooperative grid cannot be resident all at once, with the numbers, or None.

    ``per_sm`` is how many blocks of this kernel, with this block size and dynamic shared
    memory, one SM holds (the driver's occupancy); ``sms`` the device's SM count.
    """
    blocks, threads, most = math.prod(grid), math.prod(block), per_sm * sms
    if blocks <= most:
        return None
    launch = (f"a cooperative launch of {name} (it synchronises its whole grid) needs every "
              f"block resident at once: a grid of {blocks} blocks {grid} of {threads} threads "
              f"with {shared_mem} bytes of dynamic shared memory")
    if per_sm == 0:
        return LaunchError(f"{launch}, and {device} cannot hold even one such block (the "
                           "driver's occupancy is 0): use smaller blocks or less shared memory")
    return LaunchError(f"{launch}, and {device} holds at most {per_sm} such block"
                       f"{'s' if per_sm != 1 else ''} per SM (the driver's occupancy) x {sms} "
                       f"SMs = {most}: launch at most {most} blocks (a grid-stride loop covers "
                       "the rest)")


def _cluster_error(name: str, grid: Dims, cluster: Dims, where: str) -> ArgumentValueError | None:
    """A grid that is not a whole number of clusters in every dimension, or None."""
    if all(g % c == 0 for g, c in zip(grid, cluster)):
        return None
    return ArgumentValueError(f"{name}: the grid {grid} is not a whole number of clusters of "
                              f"{cluster} blocks ({where}) in every dimension: make each grid "
                              "dimension a multiple of the cluster's")


def _check_device(name: str, hooks: Any, occupancy: dict[tuple[int, int, int], int], fn: int,
                  device: int, call: ExtendedLaunch, cooperative: bool) -> None:
    """Refuse, before the launch, what the device cannot do: clusters on a device without them,
    a cooperative launch where it has none or where the grid is more than it holds at once.

    :raises LaunchError: as :func:`launch_extended`.
    """
    limits = hooks.device_limits(device)
    if call.cluster is not None and not limits.clusters:
        raise LaunchError(f"{name}: {limits.describe()} cannot launch thread-block clusters "
                          "(they need compute capability 9.0 or newer)")
    if not cooperative:
        return
    if not limits.cooperative:
        raise LaunchError(f"{name}: {limits.describe()} cannot make cooperative launches")
    threads = math.prod(call.block)
    key = (device, threads, call.shared_mem)
    per_sm = occupancy.get(key)
    if per_sm is None:
        per_sm = occupancy[key] = hooks.occupancy(device, fn, threads, call.shared_mem)
    error = co_residency_error(name, call.grid, call.block, call.shared_mem, per_sm,
                               limits.sm_count, limits.describe())
    if error is not None:
        raise error


def launch_extended(name: str, needs: LaunchNeeds, hooks: Any, params: int,
                    occupancy: dict[tuple[int, int, int], int], fn: int, device: int,
                    call: ExtendedLaunch) -> None:
    """Launch with what the CUBIN and the call ask for: cooperative where the kernel syncs its
    grid (or the call says so), in clusters where it was compiled with them or the call gives
    ``cluster``; every refusal made before the launch.

    ``occupancy`` caches the driver's blocks-per-SM answer by ``(device, threads, shared_mem)``.

    :raises ArgumentValueError: a cluster that does not divide the grid, or another cluster
        shape than the kernel was compiled with.
    :raises LaunchError: a cooperative grid larger than the device holds at once; a device
        that cannot make the launch; the driver's refusal.
    """
    cluster = call.cluster
    # a debug CUBIN whose grid sync cannot be told (grid_sync None) is launched as asked
    cooperative = bool(needs.grid_sync) if call.cooperative is None else call.cooperative
    # the launcher asked already, before the device; a direct call is checked here
    error = cluster_error(name, needs, call.grid, cluster)
    if error is not None:
        raise error
    if cooperative or cluster is not None:
        _check_device(name, hooks, occupancy, fn, device, call, cooperative)
    hooks.launch_ex(fn, device, params, dataclasses.replace(call, cooperative=cooperative),
                    f"launching {name}")
