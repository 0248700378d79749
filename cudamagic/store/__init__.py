"""The cache of built modules: the entry record (entry), one store interface (base) that the
disk store (disk) and the memory fallback (memory) implement, and the cache over them (cache).

State kept per process (the bookkeeper, the default cache, the warnings said) lives in one
object, :data:`cudamagic.store.state.state`, reset in a forked child.
"""

from .base import Refused, Store, StoredEntry, StoreUnavailable
from .cache import (EntryInfo, KernelCache, default_cache, default_cache_dir,
                    default_cache_opened, reset)
from .entry import (ENTRY_FORMAT, ENTRY_MAGIC, BadEntry, EntryRecord, decode_entry,
                    encode_entry, entry_digest)
from .limits import DEFAULT_SIZE_LIMIT, MIN_ENTRY_ROOM, parse_size

__all__ = ["BadEntry", "EntryRecord", "EntryInfo", "KernelCache", "Store", "StoredEntry",
           "Refused", "StoreUnavailable", "decode_entry", "encode_entry", "entry_digest",
           "default_cache", "default_cache_dir", "default_cache_opened", "reset",
           "ENTRY_FORMAT", "ENTRY_MAGIC", "DEFAULT_SIZE_LIMIT", "MIN_ENTRY_ROOM", "parse_size"]
