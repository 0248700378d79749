"""Entry records on a real diskcache: round trip, every check on read, no pickle."""

from __future__ import annotations

import hashlib
import pickle

import diskcache

import pytest

from cudamagic.cache import BadEntry, EntryRecord, decode_entry, encode_entry
from cudamagic.keys import FORMAT_VERSION

from .conftest import FIXTURES

CUBIN = (FIXTURES / "fixture.cubin").read_bytes()


def _record(**kw) -> EntryRecord:
    return EntryRecord(cubin=CUBIN, lowered={"fill<float>": "_Z4fillIfEvPT_S0_i"}, log="w",
                       options=("-arch=sm_90",), arch="sm_90", nvrtc_version="13.5", **kw)


def _resum(blob: bytes) -> bytes:
    """Recompute the record checksum, as a writer with a bug (or a forger) would."""
    head = len(b"CUDAMAGIC-ENTRY\n")
    return blob[:head] + hashlib.sha256(blob[head + 32:]).digest() + blob[head + 32:]


def test_round_trip():
    rec = _record()
    assert decode_entry(encode_entry(rec)) == rec


def test_entry_without_lowered_map_still_reads():
    rec = EntryRecord(cubin=CUBIN, lowered=None)
    assert decode_entry(encode_entry(rec)).lowered is None


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: CUBIN, "magic"),                                   # a bare CUBIN
    (lambda b: b[:-1], "checksum"),
    (lambda b: b + b"x", "checksum"),
    (lambda b: b[:-10] + bytes([b[-10] ^ 1]) + b[-9:], "checksum"),
    (lambda b: b[:70] + bytes([b[70] ^ 1]) + b[71:], "checksum"),  # inside the JSON header
    (lambda b: b[:20], "header"),
    (lambda b: _resum(b[:-10] + bytes([b[-10] ^ 1]) + b[-9:]), "CUBIN's sha256"),
    (lambda b: _resum(b[:-1]), "truncated"),
    (lambda b: pickle.dumps({"cubin": CUBIN}), "magic"),
])
def test_bad_values_are_refused(mutate, reason):
    with pytest.raises(BadEntry, match=reason):
        decode_entry(mutate(encode_entry(_record())))


def test_newer_format_is_refused_not_crashed():
    with pytest.raises(BadEntry, match="newer"):
        decode_entry(encode_entry(_record(), format_version=FORMAT_VERSION + 1))


def test_cache_deletes_a_bad_entry_and_says_why(cache):
    cache.put_raw("k", CUBIN)
    rec, why = cache.get("k")
    assert rec is None and "magic" in why and "k" not in cache


def test_cache_never_unpickles(cache):
    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('unpickled')",))

    # someone else writes a pickled value into the folder with plain diskcache
    with diskcache.Cache(str(cache.directory)) as other:
        other.set("k", Boom())
    rec, why = cache.get("k")
    assert rec is None and "never unpickles" in why


def test_cache_refuses_to_store_non_bytes(cache):
    with pytest.raises(TypeError, match="bytes only"):
        cache.raw.set("k", {"a": 1})
    assert "k" not in cache


def test_cache_round_trip_on_disk(cache):
    rec = _record()
    cache.put("k", rec)
    assert cache.get("k") == (rec, None)
