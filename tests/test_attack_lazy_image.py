"""A CUBIN read lazily must still refuse a damaged file with an ImageError, wherever it is read.

A hit and ``load_cubin`` read only the symbol table up front; a kernel's records, its resources,
its launch needs and the module's variables are read on first use (a launch, a report row, a
``module.globals`` long after the load). A damaged file must then give the same clear
:class:`ImageError` as an eager reading did, never an ``IndexError`` out of the ELF tables.
"""

from __future__ import annotations

import random
import struct

import pytest

from cudamagic.errors import ImageError
from cudamagic.toolchain.image import read_cubin

from .conftest import FIXTURES
from .test_image import GLOBALS_SOURCE, LAUNCH_SOURCE


@pytest.fixture(scope="module")
def cubins() -> dict[str, bytes]:
    import cudamagic

    return {
        "fixture": (FIXTURES / "fixture.cubin").read_bytes(),
        "launch": cudamagic.build(LAUNCH_SOURCE, arch="sm_90", options=["-std=c++17"],
                                  use_cache=False).cubin,
        "globals-rdc": cudamagic.build(GLOBALS_SOURCE, arch="sm_90", options=["-rdc=true"],
                                       use_cache=False).cubin,
    }


def _section_table(data: bytes) -> tuple[int, int]:
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    (shnum,) = struct.unpack_from("<H", data, 0x3C)
    return shoff, shnum


def _read_everything(data: bytes) -> None:
    """Read the CUBIN and every record a hit reads lazily; only ImageError may come out."""
    try:
        image = read_cubin(data)
    except ImageError:
        return
    readers = [lambda: image.globals] + [
        (lambda s=s, a=a: getattr(image.kernel(s), a))
        for s in image.symbols for a in ("info", "params", "resources", "launch")]
    for read in readers:
        try:
            read()
        except ImageError:
            pass


@pytest.mark.parametrize("name", ["fixture", "launch", "globals-rdc"])
@pytest.mark.parametrize("beyond", [0, 1, 1000])
def test_a_section_name_table_past_the_section_table_is_refused_at_once(cubins, name, beyond):
    data = bytearray(cubins[name])
    _, shnum = _section_table(data)
    struct.pack_into("<H", data, 0x3E, min(shnum + beyond, 0xFFFF))
    with pytest.raises(ImageError, match="section-name table"):
        read_cubin(bytes(data))


def _mutants(data: bytes, rng: random.Random, count: int):
    shoff, shnum = _section_table(data)
    spans = [struct.unpack_from("<QQ", data, shoff + 64 * i + 24) for i in range(shnum)]
    spans = [(o, s) for o, s in spans if s and o + s <= len(data)]
    for _ in range(count):
        b = bytearray(data)
        for _ in range(rng.choice((1, 2, 4))):
            where = rng.random()
            if where < 0.3:  # the ELF header
                i = rng.randrange(64)
            elif where < 0.6:  # the section table
                i = shoff + rng.randrange(shnum * 64)
            else:  # a section's bytes: records, symbols, names, code
                offset, size = rng.choice(spans)
                i = offset + rng.randrange(size)
            b[i] = rng.randrange(256)
        yield bytes(b)


@pytest.mark.parametrize("name", ["fixture", "launch", "globals-rdc"])
def test_every_lazy_reading_of_a_damaged_cubin_is_an_image_error(cubins, name):
    rng = random.Random(f"lazy-{name}")
    for mutant in _mutants(cubins[name], rng, 300):
        _read_everything(mutant)  # an IndexError, struct.error... fails the test here
