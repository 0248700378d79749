"""What every layer may use: units, lines, the hardened file read, fork-safe locks, the
Miss record, options, the toolkit's folders, CUTLASS's; process at the bottom
(the per-process state registry, which imports nothing of the package)."""
