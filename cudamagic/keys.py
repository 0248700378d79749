"""The cache key: a sha256 over every input of a compile that is known before it runs.

What the compile then reads (headers, and the places it looked for them) is not in the key: it
is the entry's dependency manifest (:mod:`cudamagic.toolchain.deps`), checked on every hit, as in
ccache's direct mode. Pure: no CUDA.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

__all__ = ["KEY_VERSION", "cache_key"]

#: Bumped when what the key covers changes meaning; part of every key.
KEY_VERSION = 2


def cache_key(*, source: str, name_expressions: Iterable[str], options: Sequence[str],
              arch: str, nvrtc_version: str, toolkit: str, cwd: str) -> str:
    """The sha256 hex digest that names a cache entry.

    Parameters
    ----------
    source : str
        The cell's source.
    name_expressions : iterable of str
        Exact strings, as a set (``a<int,int>`` and ``a<int, int>`` are two entries in the
        stored map, so two keys).
    options : sequence of str
        The NVRTC options in the order NVRTC gets them (``-UFOO -DFOO`` is not
        ``-DFOO -UFOO``), with the absolute ``-I`` folders.
    arch, nvrtc_version, toolkit : str
        The target, the compiler, and the headers every build sees.
    cwd : str
        The process's current folder: NVRTC looks there first for the cell's quoted includes.
    """
    h = hashlib.sha256()
    # lists as JSON arrays: no element can pass for two, whatever characters it holds
    for part in (f"cudamagic-key-v{KEY_VERSION}", source,
                 json.dumps(sorted(set(name_expressions))), json.dumps(list(options)), arch,
                 nvrtc_version, toolkit, cwd):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no part bleeds into the next
        h.update(data)
    return h.hexdigest()
