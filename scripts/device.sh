#!/bin/bash
# One GPU-machine run: the GPU tests, then the whole suite, then the benchmarks, logs under $OUT.
# Usage (device tool, carrying .whl made by ../shared/device/wheels.sh):  bash scripts/device.sh [what...]
# what: gpu (default), suite, notebook, bench (benchmarks/run_all.py), or a benchmarks/NAME.py
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export CUDAMAGIC_CACHE_DIR=/tmp/cudamagic-cache
nvidia-smi -L
python3 -c "import cuda.bindings, cupy, numpy; from cudamagic import compiler, driver; from cudamagic.demangle import default_demangler as d; print('cuda.bindings', cuda.bindings.__version__, 'cupy', cupy.__version__, 'numpy', numpy.__version__, 'nvrtc', compiler.nvrtc_version(), 'driver', driver.driver_version(), 'demangler', d().name)"
for what in "${@:-gpu}"; do
  case $what in
    gpu) python3 -m pytest -m gpu -v -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" ;;
    suite) python3 -m pytest -q -p no:cacheprovider tests 2>&1 | tee "$OUT/suite.log" ;;
    launch) python3 benchmarks/launch_overhead.py 2>&1 | tee "$OUT/launch.log" ;;
    bench) (cd benchmarks && python3 run_all.py) 2>&1 | tee "$OUT/bench.log" ;;
    notebook) for run in first restart; do  # the second run is a fresh kernel: a cache hit
        python3 scripts/run_notebook.py notebooks/quickstart.ipynb --out "$OUT/$run" 2>&1 \
          | tee "$OUT/notebook-$run.log"; done ;;
    *) [ -f "benchmarks/$what.py" ] && python3 "benchmarks/$what.py" 2>&1 | tee "$OUT/$what.log" ;;
  esac
done
