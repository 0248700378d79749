"""Calling a kernel: parameter records, argument encoding, the generated launcher."""

from .kernel import Kernel

__all__ = ["Kernel"]
