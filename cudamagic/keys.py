"""The cache key: a sha256 over everything that changes the CUBIN, and nothing else.

NVRTC has no dependency output (``-M`` is refused), so the headers a source includes with quotes
are found here: through the including file's folder, the ``-I`` folders and the notebook's folder,
recursively. Their contents go into the key; a header that cannot be found goes in as missing
(NVRTC will say so, or find it among the system folders, whose versions are in the key).
Angle-bracket includes are covered by the toolkit fingerprint. Pure: no CUDA.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["FORMAT_VERSION", "cache_key", "quoted_headers"]

#: Bumped when the entry record or the key changes meaning; part of every key.
FORMAT_VERSION = 1

_SEP = "\0"  # cannot occur in a name expression (options refuse it); commas can
_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"', re.M)


def quoted_headers(source: str, search_dirs: Sequence[str | Path],
                   limit: int = 1000) -> list[tuple[str, str]]:
    """Every header reachable from ``source`` through ``#include "..."``, with its sha256.

    Parameters
    ----------
    source : str
        The cell's source.
    search_dirs : sequence of path
        Where to look after the including file's own folder (the ``-I`` folders, then the
        notebook's folder).
    limit : int
        At most this many headers are followed (a guard against include cycles and generated
        trees).

    Returns
    -------
    list of (str, str)
        ``(name as written, sha256 hex or "missing")``, in the order first reached. The name,
        not the path, goes into the key: a notebook moved with its headers keeps its cache.
    """
    dirs = [Path(d) for d in search_dirs]
    seen: dict[str, tuple[str, str]] = {}  # resolved path -> (name as written, digest)
    todo: list[tuple[str, Path | None]] = [(n, None) for n in _QUOTED_INCLUDE.findall(source)]
    while todo and len(seen) < limit:
        name, from_dir = todo.pop(0)
        path = _find(name, ([from_dir] if from_dir else []) + dirs)
        if path is None:
            seen.setdefault(f"missing:{name}", (name, "missing"))
            continue
        key = str(path)
        if key in seen:
            continue
        data = path.read_bytes()
        seen[key] = (name, hashlib.sha256(data).hexdigest())
        text = data.decode("utf-8", "replace")
        todo += [(n, path.parent) for n in _QUOTED_INCLUDE.findall(text)]
    return list(seen.values())


def _find(name: str, dirs: Iterable[Path]) -> Path | None:
    candidate = Path(name)
    if candidate.is_absolute():
        return candidate if candidate.is_file() else None
    for d in dirs:
        p = d / name
        if p.is_file():
            return p.resolve()
    return None


def cache_key(*, source: str, name_expressions: Iterable[str], options: Sequence[str],
              arch: str, nvrtc_version: str, toolkit: str,
              headers: Sequence[tuple[str, str]] = ()) -> str:
    """The sha256 hex digest that names a cache entry.

    Name expressions go in as a set of exact strings (``a<int,int>`` and ``a<int, int>`` are two
    entries in the stored map, so two different keys): sorted, joined by NUL.
    """
    h = hashlib.sha256()
    for part in (f"cudamagic-key-v{FORMAT_VERSION}", source, _SEP.join(sorted(set(name_expressions))),
                 _SEP.join(options), arch, nvrtc_version, toolkit,
                 _SEP.join(f"{p}={d}" for p, d in headers)):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
