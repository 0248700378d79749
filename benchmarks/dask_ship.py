"""Shipping a built module to Dask workers against each worker compiling it.

A 1 000-kernel module (the small template source, ``k<0>`` ... ``k<999>``) is built in the
client (a cache hit). Then, on a fresh cluster of 2 workers each time:

- ship: the module goes to both workers as its entry record; each worker rebuilds it and loads
  its CUBIN on its GPU (``Module.load()``), as a first task would;
- compile: each worker compiles the same source itself (``cudamagic.build(use_cache=False)``)
  and loads it, as a worker without the client's module would.

Times are the ``client.run`` wall time (both workers in parallel), median of R rounds, the
cluster started before the clock. Run on the GPU machine (two GPUs: dask-cuda's
LocalCUDACluster; one GPU or none: LocalCluster):  python benchmarks/dask_ship.py [--repeats R]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from common import SOURCES, machine, median, names

import cudamagic


def _ship(module):
    import cudamagic as cm

    if cm.gpu_available():
        module.load()
    return len(module)


def _compile(src, exprs):
    import cudamagic as cm

    module = cm.build(src, exprs, use_cache=False)
    if cm.gpu_available():
        module.load()
    return len(module)


def cluster():
    try:
        from dask_cuda import LocalCUDACluster

        from cudamagic.toolchain.device import driver

        if driver.device_count() >= 2:
            return LocalCUDACluster(n_workers=2, dashboard_address=None, silence_logs=40)
    except ImportError:
        pass
    from distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None,
                        silence_logs=40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--names", type=int, default=1000)
    args = ap.parse_args()
    from distributed import Client

    src, exprs = SOURCES["small"][0], names("small", args.names)
    with tempfile.TemporaryDirectory() as folder:
        module = cudamagic.build(src, exprs, cache=folder)
        results: dict[str, list[float]] = {"ship": [], "compile": []}
        for _ in range(args.repeats):
            for how in ("ship", "compile"):
                with cluster() as c, Client(c) as client:
                    client.run(lambda: None)  # workers up before the clock
                    t = time.perf_counter()
                    if how == "ship":
                        out = client.run(_ship, module)
                    else:
                        out = client.run(_compile, src, exprs)
                    results[how].append(time.perf_counter() - t)
                    assert set(out.values()) == {len(module)}, out
    ship, comp = median(results["ship"]) * 1e3, median(results["compile"]) * 1e3
    print(f"# Dask: a {args.names}-kernel module on 2 workers ({machine()})\n")
    print("| how the workers get the kernels | ms (median of %d) |" % args.repeats)
    print("| --- | --- |")
    print(f"| shipped from the client (entry record, {len(module.cubin) / 1e6:.1f} MB CUBIN) "
          f"| {ship:.1f} |")
    print(f"| each worker compiles | {comp:.1f} |")
    print(f"\nshipping takes {ship / comp:.3f}x the time of compiling on the workers")


if __name__ == "__main__":
    main()
