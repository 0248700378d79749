#!/bin/bash
# Download, here, the wheels the GPU machine lacks for the whole suite (the `test` extra without
# JupyterLab, Playwright and Dask, whose tests skip there) into two folders, each under the
# 64 MiB one device call may carry. The GPU machine has CuPy, cuda-bindings, NVRTC, numpy,
# pytest and the toolkit's tools, but no IPython, ipywidgets, diskcache, redis or the rest.
# Usage, from the project root:  bash scripts/device_wheels.sh
# Then carry .whl in one call and .whl2 in the next (the machine keeps /tmp/site while warm):
#   bash scripts/device.sh install            # carrying .whl
#   bash scripts/device.sh install suite ...  # carrying .whl2: both folders are then in /tmp/site
set -eu
get() {  # get FOLDER PACKAGE...: CPython 3.12 wheels for x86-64 Linux, no dependencies
  local dest=$1; shift
  mkdir -p "$dest"
  grep -qx "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d "$dest" "$@" 2>&1 | grep -v "^WARNING: Location" || true
}
# the notebook's stack, the cache, the test runner's plug-ins, the sanitizer (about 52 MB)
get .whl diskcache ipython ipython_pygments_lexers traitlets decorator jedi parso \
  matplotlib-inline pexpect ptyprocess prompt_toolkit wcwidth stack_data executing asttokens \
  pure_eval ipywidgets comm widgetsnbextension jupyterlab_widgets ipykernel jupyter_client \
  jupyter_core nbclient nbformat fastjsonschema jsonschema jsonschema-specifications referencing \
  rpds-py tornado pyzmq nest_asyncio debugpy platformdirs redis pytest-xdist execnet \
  nvidia-cuda-sanitizer-api
# the rest of the test extra: Nsight Compute's report reader, the checkers, the disassemblers,
# crt/, hiredis, hypothesis (about 40 MB)
get .whl2 ncu-report mypy ast-serialize librt mypy_extensions typing_extensions pathspec import-linter grimp click \
  rich markdown-it-py mdurl nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm nvidia-cuda-crt hiredis \
  hypothesis sortedcontainers attrs
du -sh .whl .whl2
