"""What the notebook and its compile server share: where the server lives, which toolchain it
serves, and the frames they speak.

The server of a toolchain (:func:`toolchain_id`: the Python executable and prefix, where
cudamagic is imported from and its version, the NVRTC wheel, the compile modules' files) lives
in ``FOLDER/server/`` (:func:`server_folder`: the cache folder's, mode 700, the user's own):
``ID.sock`` its UNIX socket, ``ID.lock`` the flock one server of that toolchain holds, ``ID.log``
what it said on stderr. Another toolchain (a new cudamagic, another environment) has another
``ID`` and so a server of its own; the old one ends when idle.

A frame is an 8-byte little-endian length and that many bytes of a pickle. Pickles are read only
from a peer whose uid :func:`peer_uid` says is this process's own (``SO_PEERCRED``), through a
socket in a folder only that user can enter.

This module imports nothing of NVRTC's: the notebook's side reads it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["Facts", "SERVER_ENV", "IDLE_ENV", "DEFAULT_IDLE_S", "MAX_FRAME", "Refused", "toolchain_id",
           "server_folder", "paths", "send", "recv", "peer_uid", "compile_environment"]

#: ``0`` (off, false, no): compile in the notebook's process, as before the server
SERVER_ENV = "CUDAMAGIC_COMPILE_SERVER"
#: Seconds a server with nothing to do waits before it ends
IDLE_ENV = "CUDAMAGIC_COMPILE_SERVER_IDLE"
DEFAULT_IDLE_S = 600.0
#: The largest frame either side reads (a CCCL cell's CUBIN, trace and log are some MB)
MAX_FRAME = 1 << 30
_HEADER = struct.Struct("<Q")


class Refused(OSError):
    """The socket's peer is another user's, or the folder is not this user's alone."""


@dataclass(frozen=True)
class Facts:
    """What a server says of itself and its NVRTC (``%cuda_info``, the cache key, PCH plans).

    ``owner``: the process NVRTC sees making and using PCHs (the server's pid and start), and
    ``generation``: how often its heap was resized, as :mod:`cudamagic.toolchain.compile.pch` records
    a PCH's maker.
    """

    pid: int
    started: float
    version: str
    nvrtc_version: str
    nvrtc_identity: str
    archs: tuple[int, ...]
    pch_supported: bool
    owner: str
    generation: int
    served: int = 0


def _package_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _stamps(folder: str) -> list[str]:
    """Each compile module's size and modification time: an edited checkout is another
    toolchain (its server would compile with the old code)."""
    out = []
    for sub in ("", "toolchain", "compiler"):
        path = os.path.join(folder, sub)
        try:
            names = sorted(n for n in os.listdir(path) if n.endswith(".py"))
        except OSError:
            continue
        for name in names:
            try:
                st = os.stat(os.path.join(path, name))
            except OSError:
                continue
            out.append(f"{sub}/{name}:{st.st_size}:{st.st_mtime_ns}")
    return out


def toolchain_id(nvrtc_wheel: str | None) -> str:
    """The name of the server that compiles for this process: one per user and toolchain
    (cudamagic's version is its files' stamps)."""
    h = hashlib.sha256()
    package = _package_dir()
    for part in (sys.executable, sys.prefix, package, nvrtc_wheel or "",
                 str(os.geteuid()), *_stamps(package)):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]


def server_folder(cache_dir: str) -> str:
    """``cache_dir/server``, made 700 where it is not there; the user's alone or refused.

    :raises Refused: the folder is another user's, open to others, or not a folder.
    :raises OSError: it cannot be made.
    """
    folder = os.path.join(cache_dir, "server")
    os.makedirs(cache_dir, mode=0o700, exist_ok=True)
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(folder)
    import stat
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise Refused(f"{folder} is not a folder of this user's own")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return folder


def paths(folder: str, ident: str) -> tuple[str, str, str]:
    """The server's socket, lock and log."""
    base = os.path.join(folder, ident)
    return base + ".sock", base + ".lock", base + ".log"


def send(sock: socket.socket, value: Any) -> None:
    """One frame: ``value`` pickled."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the peer closed the connection mid-frame"
                                  if left != size or chunks else "the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket) -> Any:
    """One frame's value.

    :raises ConnectionError: the peer closed the connection (before or inside the frame).
    :raises Refused: a frame larger than :data:`MAX_FRAME`.
    """
    size, = _HEADER.unpack(_exactly(sock, _HEADER.size))
    if size > MAX_FRAME:
        raise Refused(f"a frame of {size} bytes (at most {MAX_FRAME})")
    return pickle.loads(_exactly(sock, size))


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected UNIX socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


#: The environment a compile reads, besides its options: NVRTC's and CUDA's variables, the
#: package's own, and where temporary files go
_ENV_PREFIXES = ("CUDA", "NVRTC", "NV_", "CUDAMAGIC_", "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH")


def compile_environment() -> dict[str, str]:
    """The variables of this process's environment that a compile may read."""
    return {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}


def apply_environment(env: dict[str, str]) -> None:
    """Make this process's compile environment ``env`` (in the server's child)."""
    for key in [k for k in os.environ if k.startswith(_ENV_PREFIXES)]:
        if key not in env:
            del os.environ[key]
    os.environ.update(env)
