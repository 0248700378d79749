"""toolchain/binary/: What a CUBIN, its ELF, its PTX and its mangled names hold, read without a compiler or a GPU. Imports no other room of toolchain/."""
