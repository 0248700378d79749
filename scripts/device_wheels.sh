#!/bin/bash
# Download, here, the wheels the GPU machine lacks for the whole suite into one folder, .whl,
# under the 64 MiB one device call may carry together with the tree (about 51 MB: the `test`
# extra without JupyterLab, Playwright and Dask, whose tests skip there, and without the
# sanitizer and ncu-report wheels: that machine's toolkit has compute-sanitizer and ncu, which
# cudamagic finds there). The GPU machine has CuPy, cuda-bindings, NVRTC, numpy, pytest and the
# toolkit's tools, but no IPython, ipywidgets, diskcache, redis or the rest.
# Usage, from the project root:  bash scripts/device_wheels.sh
# Then every device call carries .whl:  bash scripts/device.sh verify
set -eu
dest=.whl
mkdir -p "$dest" .git/info
grep -qx "/$dest/" .git/info/exclude 2>/dev/null || echo "/$dest/" >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$dest" \
  diskcache ipython ipython_pygments_lexers traitlets decorator jedi parso matplotlib-inline \
  pexpect ptyprocess prompt_toolkit wcwidth stack_data executing asttokens pure_eval ipywidgets \
  comm widgetsnbextension jupyterlab_widgets ipykernel jupyter_client jupyter_core nbclient \
  nbformat fastjsonschema jsonschema jsonschema-specifications referencing rpds-py tornado pyzmq \
  nest_asyncio debugpy platformdirs redis pytest-xdist execnet \
  mypy ast-serialize librt mypy_extensions typing_extensions pathspec import-linter grimp click \
  rich markdown-it-py mdurl nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm nvidia-cuda-crt hiredis \
  hypothesis sortedcontainers attrs nvidia-cutlass 2>&1 | grep -v "^WARNING: Location" || true
du -sh "$dest"
