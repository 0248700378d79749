"""The connection to the team cache's server: replies bounded in time and bytes, and URLs as
they may be shown (never with a password).

:class:`BoundedSocket` wraps the socket redis-py connects (:func:`bounded` makes the
connection class that does): a reply must come whole within a bound that grows with its bytes,
and hold at most a budget of bytes, however the parser reads it. :func:`shown_url` and
:func:`masked` keep a URL's passwords out of every text a user sees: a password holding
``/``, ``?`` or ``#`` (as ``openssl rand -base64`` makes them) is split by a URL parser into a
host, a port or a path, and quoted so in its errors.
"""

from __future__ import annotations

import re
import socket
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

__all__ = ["BoundedSocket", "bounded", "too_slow", "shown_url", "masked", "refused_url_text",
           "SLOW_FROM"]

#: A reply that timed out after this many bytes was a record coming too slowly for its size:
#: that lookup is a miss, the server is not skipped.
SLOW_FROM = 64 << 10


#: Characters that end a URL's user part for a URL parser: a password holding one is read as
#: a host, a port or a path by the client, and quoted as such in its errors.
_BREAKS_URL = "/?#"


def _user_part(url: str) -> str:
    """What a URL holds before its last ``@`` (a password may hold ``@``, ``/``, ``?``...)."""
    return url.partition("://")[2].rpartition("@")[0]


def shown_url(url: str) -> str:
    """The URL without its passwords, however it parses: the user part up to the last ``@``
    (everything after the user's name; all of it where it holds a character that ends a
    user part), and the ``password=`` of the query with all that follows it. It never
    raises."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "(a URL that is not one)" if "@" in url or "password" in url.lower() else url
    # the query's password first, to the end: one holding "@" would pass for the end of a
    # user part
    rest = re.sub(r"(?i)([?&;]password=).*", r"\1***", rest, flags=re.S)
    if "@" not in rest:  # no user part left: a netloc that is no host:port is a password's start
        netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if ":" in netloc and not netloc.rpartition(":")[2].isdigit() \
                and not netloc.endswith("]"):  # [::1], an IPv6 host without a port
            rest = "***" + rest[len(netloc):]
    user, at, rest = rest.rpartition("@")
    if at:
        name, colon, _ = user.partition(":")
        shown = (f"{name}:***" if colon and not any(c in name for c in _BREAKS_URL)
                 else "***" if colon or any(c in user for c in _BREAKS_URL) else user)
        rest = f"{shown}@{rest}"
    rest = re.sub(r"(?i)(username=)[^&#]*", r"\1***", rest)
    rest = re.sub(r"(?i)(password=).*", r"\1***", rest, flags=re.S)
    return f"{scheme}://{rest}"


def _secrets(url: str) -> list[str]:
    """The URL's passwords (as written and decoded) and the pieces of them a URL parser may
    split off and quote, longest first."""
    user = _user_part(url)
    found = [user.partition(":")[2] if ":" in user else user]
    query = re.search(r"(?i)password=(.*)", url.partition("://")[2], flags=re.S)
    if query:
        found.append(query.group(1))
    pieces = set()
    for secret in filter(None, found):
        for text in (secret, urllib.parse.unquote(secret)):
            pieces.add(text)
            pieces.update(p for p in re.split(r"[/?#@:&=]", text) if len(p) >= 3)
    return sorted(pieces, key=len, reverse=True)


def masked(text: str, url: str) -> str:
    """``text`` without the URL's passwords or the pieces of them, should it quote them."""
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return text


def refused_url_text(url: str, exc: Exception) -> str:
    """Why the client refused a URL, never quoting its password: where the password holds a
    character that ends a user part, the client's message quotes pieces of it (as a port, a
    host...), so it is replaced by what to do."""
    user = _user_part(url)
    if any(c in user.partition(":")[2] for c in _BREAKS_URL):
        return ("its password holds '/', '?' or '#', which a URL must spell percent-encoded "
                "(%2F, %3F, %23); or put the password in $CUDAMAGIC_REMOTE_PASSWORD_FILE")
    return masked(str(exc), url)


class _TooSlow(socket.timeout):
    """A reply that ran out of time after :data:`SLOW_FROM` bytes: a record coming too slowly
    for its size, which costs its lookup only."""


class _OverBudget(socket.timeout):
    """A reply past the bytes any reply may hold: the server is not answering as Redis."""


class BoundedSocket:
    """A connection's socket on which every request's reply must come whole within ``bound``
    seconds of the request being sent plus ``per_byte`` seconds for each byte that came, and
    within ``budget`` bytes, whichever way the parser reads it (``recv`` or, with hiredis,
    ``recv_into``): the client's own timeout bounds each read only, so a server sending one
    byte at a time, each inside that timeout, held a lookup for as long as it liked, and a
    declared size of terabytes was read for as long as bytes came. A request's send has the
    same time per byte (Python bounds a whole ``sendall`` by the timeout)."""

    def __init__(self, sock: Any, bound: float, per_byte: float, budget: int) -> None:
        self._sock, self._bound, self._per_byte, self._budget = sock, bound, per_byte, budget
        self._asked = sock.gettimeout()
        self._start, self._got = time.monotonic(), 0

    def sendall(self, data: Any, *flags: int) -> None:
        if self._asked:  # neither blocking (None) nor asking what is there (0)
            self._sock.settimeout(self._asked + memoryview(data).nbytes * self._per_byte)
        else:
            self._sock.settimeout(self._asked)
        self._sock.sendall(data, *flags)
        self._start, self._got = time.monotonic(), 0

    def settimeout(self, value: float | None) -> None:
        self._asked = value
        self._sock.settimeout(value)

    def _late(self) -> socket.timeout:
        took = time.monotonic() - self._start
        text = f"the reply took over {took:.2g} s for its {self._got} bytes"
        return _TooSlow(text) if self._got >= SLOW_FROM else socket.timeout(text)

    def _read(self, read: Callable[[], Any], counted: Callable[[Any], int], flags: int) -> Any:
        if self._asked != 0:  # 0: the client asking whether anything is there, never blocks
            left = self._start + self._bound + self._got * self._per_byte - time.monotonic()
            if left <= 0:
                raise self._late()
            self._sock.settimeout(left if self._asked is None else min(left, self._asked))
        try:
            got = read()
        except socket.timeout:
            raise self._late() from None
        if not flags & socket.MSG_PEEK:  # a look at what is there reads nothing
            self._got += counted(got)
        if self._got > self._budget:
            raise _OverBudget(f"the reply is over {self._budget} bytes")
        return got

    def recv(self, size: int, flags: int = 0) -> bytes:
        return self._read(lambda: self._sock.recv(size, flags), len, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        return self._read(lambda: self._sock.recv_into(buffer, nbytes, flags), int, flags)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def bounded(base: type, bound: float, per_byte: float, budget: int) -> type:
    """``base`` (redis-py's connection class for the URL's scheme) with its socket bounded."""

    class Bounded(base):
        def _connect(self) -> Any:
            return BoundedSocket(super()._connect(), bound, per_byte, budget)

    return Bounded


def too_slow(exc: BaseException | None) -> bool:
    """Whether a client's error is a reply that ran out of time after :data:`SLOW_FROM` bytes
    (the client wraps the socket's timeout in its own; a reply over its budget is not one)."""
    for _ in range(8):
        if exc is None or isinstance(exc, _OverBudget):
            return False
        if isinstance(exc, _TooSlow):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
