"""What became of a compiled build's entry, in words: kept, or why not (the report's note, the
cell's history, an interrupted build's message)."""

from __future__ import annotations

from ..core.miss import StoreOutcome, Stored

__all__ = ["stored_text", "stored_note", "not_cached"]


def stored_text(stored: Stored) -> str:
    """What became of a compiled build's entry, as the end of a sentence (an interrupted
    build's message says it)."""
    if stored.outcome is StoreOutcome.KEPT:
        return "its CUBIN is kept in the cache, so the next run is a hit"
    if stored.outcome is StoreOutcome.FAILED:
        return "it failed, so nothing is kept"
    why = {StoreOutcome.NO_CACHE: "--no-cache", StoreOutcome.RACY: stored.detail,
           StoreOutcome.BUSY: "the cache's database was locked"}[stored.outcome]
    return f"its CUBIN is not cached ({why})"


def stored_note(stored: Stored, wait_s: float) -> str | None:
    """The build's note where its entry could have been kept and was not, else None
    (``wait_s``: how long a store waits for the cache's database)."""
    why = not_cached(stored, wait_s)
    return None if why is None else f"{why}; the next run compiles again"


def not_cached(stored: Stored, wait_s: float) -> str | None:
    """Why the build's entry was not kept ("not cached: ..."), where it could have been; else
    None. The cell's history keeps it, for the next run of the same inputs to say."""
    if stored.outcome is StoreOutcome.RACY:
        return f"not cached: {stored.detail}, so its text cannot be tied to this CUBIN"
    if stored.outcome is StoreOutcome.BUSY:
        return (f"not cached: another process kept the cache's database locked for over "
                f"{wait_s:g} s")
    return None
