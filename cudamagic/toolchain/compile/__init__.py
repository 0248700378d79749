"""toolchain/compile/: NVRTC, the header listing and manifest, the PCH, nvJitLink and fatbins: a CUBIN made from source. Never imports device/ or tools/."""
