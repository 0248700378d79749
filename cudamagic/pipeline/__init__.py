"""One build and the module it makes: the Python API (api) above the steps (steps:
restore a hit or compile a miss), the Module, its names, the explanation of a
miss, the tool runs' support and the precompiled header's part."""
