"""toolchain/device/: The CUDA driver and what it answers (occupancy). Never imports compile/ or tools/."""
