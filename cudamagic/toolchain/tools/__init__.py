"""toolchain/tools/: compute-sanitizer, ncu and nvdisasm: finding them, running them, reading their reports. Never imports compile/ or device/."""
