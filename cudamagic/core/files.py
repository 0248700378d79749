"""Reading a file the package did not write itself: never follow a link unasked, never wait on a
FIFO, never read a device or an oversized file without end.

One place for the checks that the cache's value files, the history's records and a foreign
CUBIN all need: open without blocking (``O_NONBLOCK``: a FIFO opens at once instead of waiting
for a writer), optionally without following a symbolic link (``O_NOFOLLOW``), then ``fstat`` the
descriptor itself (not the name, which another process may swap) and read at most what it said.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from ..errors import ImageError

__all__ = ["FileRefused", "NotAFile", "TooLarge", "Untrusted", "open_regular", "read_regular",
           "read_fd", "file_kind", "read_cubin_arg"]

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a folder"), (stat.S_ISREG, "a file"))

_BASE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def file_kind(mode: int) -> str:
    """What ``st_mode`` describes, in words: "a folder", "a FIFO", "a symbolic link"..."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


class FileRefused(Exception):
    """A file :func:`open_regular` will not read; ``reason`` completes "the file at path ...".

    Not an ``OSError``: callers tell a refusal (say why) from a file that is gone or unreadable
    (often a plain miss), and diskcache takes an ``OSError`` from its ``Disk`` for "gone".
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason


class NotAFile(FileRefused):
    """A symbolic link (where links are not followed), a folder, a FIFO, a device or a socket:
    ``mode`` holds its file type bits (``stat.S_ISDIR(exc.mode)``), ``kind`` the words."""

    def __init__(self, path: str, mode: int) -> None:
        self.mode = stat.S_IFMT(mode)
        self.kind = file_kind(self.mode)
        super().__init__(path, f"is {self.kind}")


class TooLarge(FileRefused):
    """A regular file larger than the caller's bound."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(path, f"is {size} bytes, more than {limit}")
        self.size = size
        self.limit = limit


class Untrusted(FileRefused):
    """A regular file the caller's ``trust`` check refused (its owner or mode, say)."""


def open_regular(path: str | os.PathLike, *, max_size: int, follow_links: bool = False,
                 trust: Callable[[os.stat_result], str | None] | None = None
                 ) -> tuple[int, int]:
    """A descriptor of the regular file at ``path`` and its size; the caller closes it.

    Parameters
    ----------
    max_size : int
        Larger files are refused.
    follow_links : bool
        Whether a symbolic link as the last part of the name is followed (a path the user gave)
        or refused (a file in a folder of the package's, where a link could point anywhere).
    trust : callable, optional
        Given the descriptor's ``fstat``; returns why the file must not be read, or None.

    :raises NotAFile: a link (unless followed), a folder, a FIFO, a device or a socket.
    :raises TooLarge: over ``max_size`` bytes.
    :raises Untrusted: ``trust`` said why not.
    :raises OSError: it cannot be opened (gone, no permission).
    """
    name = os.fspath(path)
    label = os.fsdecode(name)
    try:
        fd = os.open(name, _BASE_FLAGS | (0 if follow_links else _NOFOLLOW))
    except IsADirectoryError:
        raise NotAFile(label, stat.S_IFDIR) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise NotAFile(label, stat.S_IFLNK) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotAFile(label, st.st_mode)
        why = trust(st) if trust is not None else None
        if why:
            raise Untrusted(label, why)
        if st.st_size > max_size:
            raise TooLarge(label, st.st_size, max_size)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_fd(fd: int, size: int) -> bytes:
    """At most ``size`` bytes (what fstat said the regular file holds) from ``fd``, then close
    it; a file that grew since is not read past ``size``."""
    try:
        chunks, got = [], 0
        while got < size:  # a short read (a signal, over 2 GiB): read on
            more = os.read(fd, size - got)
            if not more:
                break
            chunks.append(more)
            got += len(more)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_regular(path: str | os.PathLike, *, max_size: int, follow_links: bool = False,
                 trust: Callable[[os.stat_result], str | None] | None = None) -> bytes:
    """The bytes of the regular file at ``path``, checked as :func:`open_regular` checks it."""
    return read_fd(*open_regular(path, max_size=max_size, follow_links=follow_links,
                                 trust=trust))


#: The largest file load_cubin reads: CUBINs of many thousand kernels are tens of MB, and a
#: fatbin's entry for one target at most 512 MiB (toolchain.fatbin.MAX_ENTRY_BYTES)
MAX_CUBIN_FILE = 1 << 30


_MAX_SHOWN = 200  # characters of a path a message quotes


def read_cubin_arg(path_or_bytes: object) -> tuple[bytes, str]:
    """The bytes of what :func:`load_cubin` was given, and a label for messages.

    :raises ImageError: not bytes, not a path, or a path that cannot be read as a file.
    """
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes), "<bytes>"
    if not isinstance(path_or_bytes, (str, os.PathLike)):
        raise ImageError(f"load_cubin takes a path or the CUBIN's bytes, got "
                         f"{type(path_or_bytes).__name__}")
    path = os.fspath(path_or_bytes)
    if isinstance(path, str) and "\n" in path and not os.path.lexists(path):
        # text, not a path (PTX read with open().read()): its bytes, which the loader reads
        return path.encode("utf-8", "surrogateescape"), "<text>"
    label = str(path) if len(path) <= _MAX_SHOWN else \
        f"{path[:_MAX_SHOWN]!s}... ({len(path)} characters)"  # what messages quote
    try:  # a path the user gave: a link is followed, a FIFO or a device refused at once
        return read_regular(path, max_size=MAX_CUBIN_FILE, follow_links=True), str(path)
    except NotAFile as exc:
        if stat.S_ISDIR(exc.mode):
            raise ImageError(f"{label} is a folder, not a CUBIN file") from None
        raise ImageError(f"{label} is not a regular file (a FIFO, a device or a socket): "
                         "give the CUBIN file itself") from None
    except TooLarge as exc:
        raise ImageError(f"{label} is {exc.size} bytes: more than a CUBIN is "
                         f"({MAX_CUBIN_FILE >> 20} MiB at most)") from None
    except MemoryError:
        raise ImageError(f"{label} is too large to read into this process's memory now (a "
                         f"CUBIN is tens of MB)") from None
    except ValueError as exc:  # a NUL in the path
        raise ImageError(f"{label!r} is no path ({exc})") from None
    except OSError as exc:
        raise ImageError(f"{label} cannot be read: {exc.strerror or exc}") from None
