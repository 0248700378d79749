"""The cache key: a sha256 over every input of a compile that is known before it runs.

What the compile then reads (headers, and the places it looked for them) is not in the key: it
is the entry's dependency manifest (:mod:`cudamagic.toolchain.compile.deps`), checked on every hit, as in
ccache's direct mode. Pure: no CUDA.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

__all__ = ["KEY_VERSION", "cache_key"]

#: Bumped when what the key covers changes meaning; part of every key. 3: folders by names that
#: travel (the toolkit's by their place in their packages, relative -I from the working
#: folder), and no working folder: the same cell in another checkout, venv or machine has the
#: same key, and its manifest (checked against this build's folders) decides.
KEY_VERSION = 3


def cache_key(*, source: str, name_expressions: Iterable[str], options: Sequence[str],
              arch: str, nvrtc_version: str, toolkit: str) -> str:
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
        ``-DFOO -UFOO``), each ``-I`` folder by its name that travels (a toolkit folder by its
        place in its package, a relative one from the working folder, an absolute one as it
        is).
    arch, nvrtc_version, toolkit : str
        The target, the compiler, and the headers every build sees (by versions and names).

    The working folder is not part of it: NVRTC looks there first for the cell's quoted
    includes, and the entry's manifest records what it found there, by its path from the
    working folder; a hit checks it there.
    """
    h = hashlib.sha256()
    # lists as JSON arrays: no element can pass for two, whatever characters it holds
    for part in (f"cudamagic-key-v{KEY_VERSION}", source,
                 json.dumps(sorted(set(name_expressions))), json.dumps(list(options)), arch,
                 nvrtc_version, toolkit):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: no part bleeds into the next
        h.update(data)
    return h.hexdigest()
