"""The user's surface: the IPython magics and the warm-up (magic), %cuda_info and the
report's resources (info); the only modules that import IPython or comm."""
