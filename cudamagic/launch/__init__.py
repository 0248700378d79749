"""Calling a kernel: the parameter table (params), the checked encoding (encode), the generated
launcher (launcher), cooperative and cluster launches (extended), the kernel object (kernel)."""

from .kernel import Kernel

__all__ = ["Kernel"]
