"""The hit path does what trust needs once: the entry's bytes pass through sha256 one time, and
a CUBIN damaged anywhere (in bytes only the checksum covers) is still refused."""

from __future__ import annotations

import hashlib

import pytest

from cudamagic.store import entry
from cudamagic.store.entry import BadEntry, EntryRecord, decode_entry, encode_entry


def _record(size: int) -> EntryRecord:
    cubin = bytes((i * 131 + 7) % 251 for i in range(size))
    return EntryRecord(cubin=cubin, lowered={"k<0>": "_Z1kILi0EEvPfi"}, log="", options=(),
                       arch="sm_90", nvrtc_version="13.5", key="k" * 64)


@pytest.mark.parametrize("size", [1, 4096, 1 << 20])
def test_a_read_hashes_the_cubin_once(monkeypatch, size):
    hashed: list[int] = []
    real = hashlib.sha256

    def counting(data=b"", *a, **k):
        hashed.append(len(data))
        return real(data, *a, **k)

    value = encode_entry(_record(size))
    monkeypatch.setattr(entry.hashlib, "sha256", counting)
    rec = decode_entry(value, "k" * 64)
    assert rec.cubin == _record(size).cubin
    assert sum(hashed) < len(value) + size, (hashed, len(value))   # one pass, not two
    assert len(hashed) == 1


@pytest.mark.parametrize("where", [0, 1, 2, -3, -1])
def test_a_damaged_cubin_byte_is_refused_by_the_one_pass(where):
    value = bytearray(encode_entry(_record(4096)))
    size = 4096
    at = len(value) - size + (where % size)
    value[at] ^= 0x40
    with pytest.raises(BadEntry, match="checksum"):
        decode_entry(bytes(value), "k" * 64)
