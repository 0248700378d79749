"""The debugging tools' own bounds, without a GPU: what a tool run keeps of a child's output, how
long its timeout lets it take, what it reads of the files the child and the tool leave, how the
child rebuilds arguments that share memory, what the child is given of the notebook's
environment, what a clean initcheck run could not see, and the cluster launches the CUBIN alone
refuses.
"""

from __future__ import annotations

import numpy as np
import pytest

import cudamagic
from cudamagic.launch import capture as cap

from .test_debug_tools import _DeviceArray, _host_copy


class _Memory:
    """Device memory as the child sees it: allocations of exactly the size asked, which a write
    past their end does not grow (it fails, as the tool would report it)."""

    STEP = 1 << 40

    def __init__(self) -> None:
        self.blocks: dict[int, bytearray] = {}

    def alloc(self, n: int) -> int:
        base = self.STEP * (len(self.blocks) + 1)
        self.blocks[base] = bytearray(n)
        return base

    def _block(self, address: int, n: int) -> tuple[bytearray, int]:
        base = address - address % self.STEP
        block, at = self.blocks[base], address - base
        assert at + n <= len(block), f"{n} bytes at {at} of a {len(block)}-byte buffer"
        return block, at

    def write(self, address: int, data: bytes) -> None:
        block, at = self._block(address, len(data))
        block[at:at + len(data)] = data

    def read(self, address: int, n: int) -> bytes:
        block, at = self._block(address, n)
        return bytes(block[at:at + n])


class _View(_DeviceArray):
    """``x[start:stop]`` as CuPy makes it: an empty view's address is where it starts in x
    (NumPy gives an empty slice its array's own address)."""

    def __init__(self, x: np.ndarray, start: int, stop: int) -> None:
        super().__init__(x[start:stop])
        self.address = x.__array_interface__["data"][0] + start * x.itemsize
        self.__cuda_array_interface__["data"] = (self.address, False)


def _shared_rows():
    x = np.arange(64, dtype=np.float32)
    # (the three arguments as (start, stop) of x, the child's buffer sizes, the arguments that
    # keep the notebook's distances)
    return {"an empty view between two that overlap": (((0, 64), (10, 10), (20, 30)), [256],
                                                       (0, 1, 2)),
            "an empty view at the array's start": (((0, 0), (0, 64), (4, 8)), [256], (0, 1, 2)),
            "a group ends at its furthest byte, not its last member's":
                (((0, 64), (1, 3), (2, 4)), [256], (0, 1, 2)),
            "a later member reaches past the first": (((0, 40), (8, 16), (30, 64)), [256],
                                                      (0, 1, 2)),
            "an empty view outside every array": (((0, 8), (20, 20), (30, 40)), [0, 32, 40], ())}


@pytest.mark.parametrize("row", list(_shared_rows()))
def test_overlapping_arrays_share_one_buffer_at_the_notebooks_distances(row):
    # before: an empty view (x[10:10]) ended the group it lay in, so x[20:30] was rebuilt in a
    # buffer of its own, another allocation's distance from x (8 GiB on the H200) instead of
    # 80 bytes; this memory does not grow when written past an allocation's end, so a group
    # that ended where its last member ends would be seen too small
    x = np.arange(64, dtype=np.float32)
    spans, buffers, together = _shared_rows()[row]
    views = [_View(x, start, stop) for start, stop in spans]
    k = cudamagic.build('extern "C" __global__ void k(float* a, float* b, float* c) {}',
                        use_cache=False)["k"]
    c = cap.capture("k", k.params, (1,), (1,), tuple(views),
                    copy=_host_copy)
    memory = _Memory()
    slots, placed = cap.rebuild(c, memory.alloc, memory.write)
    assert sorted(len(b) for b in memory.blocks.values()) == buffers
    child = [int.from_bytes(s, "little") for s in slots]
    parent = [v.address for v in views]
    assert len({child[i] - parent[i] for i in together}) <= 1
    for ptr, view in zip(child, views):  # each pointer reads its own array's values
        got = np.frombuffer(memory.read(ptr, view.host.nbytes), np.float32)
        assert got.tolist() == view.host.tolist()
    assert [p.nbytes for p in placed] == [v.host.nbytes for v in views]
