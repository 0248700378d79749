"""The tools a build drives: NVRTC, the header manifest, the CUBIN reader, demanglers, the driver."""
