"""The cache of built modules: the entry record, the disk store and the memory fallback."""

from .disk import (BadEntry, EntryRecord, KernelCache, decode_entry, default_cache,
                   encode_entry)

__all__ = ["BadEntry", "EntryRecord", "KernelCache", "decode_entry", "default_cache",
           "encode_entry"]
