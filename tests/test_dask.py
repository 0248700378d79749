"""A module built in the client travels to Dask workers as its entry record: the same kernels
there, no compile, no cache folder, and the GPU (or NoDeviceError) of the worker's own."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import cudamagic

distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed "
                                  "(pip install cudamagic[dask])")

SOURCE = r"""
template <typename T>
__global__ void saxpy(T a, const T* x, T* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i]; }
extern "C" __global__ void fill(float* x, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = v; }
"""
EXPRS = ["saxpy<float>", "saxpy<double>"]


def _on_worker(module, kernel):
    """What a task sees: the kernel table, whether NVRTC or a cache was touched, a launch."""
    import os
    import sys

    from cudamagic import store
    from cudamagic.toolchain.compile import nvrtc as compiler

    compiles = []
    real = compiler._compile
    compiler._compile = lambda *a, **k: compiles.append(a) or real(*a, **k)
    try:
        try:
            kernel((1,), (32,), (None, 1.0, 0))
            launched = "launched"
        except cudamagic.NoDeviceError as exc:
            launched = f"NoDeviceError: {exc}"
    finally:
        compiler._compile = real
    return {"pid": os.getpid(),
            "map": {k.name_expression: (k.symbol, k.python_name) for k in module.kernels.values()},
            "same_module": kernel.module is module,
            "compiles": len(compiles),
            "nvrtc_loaded": "cuda.bindings.nvrtc" in sys.modules,
            "cache_opened": store.default_cache_opened(),
            "launch": launched}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=40) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return cudamagic.build(SOURCE, EXPRS, cache=tmp_path_factory.mktemp("cache"))


def test_workers_get_the_clients_kernels_without_compiling(client, module):
    workers = list(client.scheduler_info()["workers"])
    assert len(workers) == 2
    futures = [client.submit(_on_worker, module, module["fill"], workers=[w], pure=False)
               for w in workers]
    results = client.gather(futures)
    assert len({r["pid"] for r in results}) == 2  # two processes
    client_map = {k.name_expression: (k.symbol, k.python_name) for k in module.kernels.values()}
    for r in results:
        assert r["map"] == client_map
        assert r["same_module"] and r["compiles"] == 0 and not r["nvrtc_loaded"]
        assert not r["cache_opened"]  # a worker needs no cache folder
        if not cudamagic.gpu_available():
            assert r["launch"].startswith("NoDeviceError: no CUDA device is available")


def test_a_worker_gets_the_variables_types(client, tmp_path):
    """Issue 27 A1: a module shipped to a Dask worker kept its variables' symbols and lost their
    types (uint8 views there); the compiler's types travel with it."""
    source = ("namespace a { __device__ float s; }\nnamespace b { __device__ int s[4]; }\n"
              "namespace z { template <class T> __device__ T tv[2]; }\n"
              'extern "C" __global__ void k(float* o) { o[0] = a::s + b::s[1]; }\n')
    module = cudamagic.build(source, ["&z::tv<double>"], cache=tmp_path)

    def typed(m):
        from cudamagic.toolchain.binary.variables import find

        return ({v.cxx_name: (v.dtype, v.shape) for v in m.globals},
                find(m.globals, "z::tv<double>", m.variable_expressions).name)

    here = typed(module)
    assert here[0] == {"a::s": ("float32", ()), "b::s": ("int32", (4,)),
                       "z::tv<double>": ("float64", (2,))}
    assert client.submit(typed, module, pure=False).result() == here


def test_map_and_many_kernels_of_one_module(client, module):
    kernels = [module["saxpy<float>"], module["saxpy<double>"], module["fill"]]
    names = client.gather(client.map(lambda k: (k.name_expression, k.symbol), kernels,
                                     pure=False))
    assert names == [(k.name_expression, k.symbol) for k in kernels]


def test_argument_checks_run_on_the_worker(client, module):
    def bad_call(k):
        try:
            k((1,), (32,), (1.0, np.zeros(4, np.float32), None, 4))  # a host array
        except cudamagic.CudaMagicError as exc:
            return type(exc).__name__, str(exc)
        return "no error", ""

    kind, message = client.submit(bad_call, module["saxpy<float>"], pure=False).result()
    assert kind == "ArgumentTypeError" and "parameter 1" in message and "host array" in message


def test_a_tampered_record_is_refused_on_arrival(module):
    blob = bytearray(pickle.dumps(module))
    at = blob.find(b"_Z5saxpyIfE")  # inside the checksummed kernel table
    blob[at + 8] ^= 1
    with pytest.raises(cudamagic.ImageError, match="arrived damaged or altered and is refused"):
        pickle.loads(bytes(blob))
    cubin_at = blob.find(module.cubin[64:96])  # inside the CUBIN
    blob = bytearray(pickle.dumps(module))
    blob[cubin_at] ^= 0xFF
    with pytest.raises(cudamagic.ImageError, match="refused"):
        pickle.loads(bytes(blob))


@pytest.mark.parametrize("column, value", [
    (3, "bogus"),            # how the symbol was found: no ResolvedBy says so
    (3, ""), (1, 7), (0, None), (5, "a sixth column"),
])
def test_a_re_signed_kernel_table_of_the_wrong_shape_is_refused(module, column, value):
    """A payload whose kernel table was altered and its checksum made again (the checksum is
    no signature) is still refused as ImageError where a row is not the table's: a word no
    ResolvedBy has raised a bare ValueError from the enum before."""
    import dataclasses

    from cudamagic.pipeline.module import arrive
    from cudamagic.store.entry import TableRow, decode_entry, encode_entry

    record = decode_entry(module.payload())
    rows = [[*r[:column], value, *r[column + 1:]] for r in record.kernels["rows"]]
    assert all(TableRow.from_json(r).to_json() == r for r in record.kernels["rows"])
    altered = encode_entry(dataclasses.replace(record, kernels={**record.kernels, "rows": rows}))
    with pytest.raises(cudamagic.ImageError, match="arrived damaged or altered and is refused"):
        arrive(altered, module.report)


def test_a_module_round_trips_in_process(module):
    back = pickle.loads(pickle.dumps(module))
    assert back.key == module.key and back.cubin == module.cubin
    assert {e: (k.symbol, k.python_name, k.resolved_by, k.signature)
            for e, k in back.kernels.items()} == \
        {e: (k.symbol, k.python_name, k.resolved_by, k.signature)
         for e, k in module.kernels.items()}
    assert [p for p in back["saxpy<float>"].params] == [p for p in module["saxpy<float>"].params]


def _saxpy_block(block, kernel, a):
    """map_blocks body: a CuPy block on this worker's GPU, saxpy'd in place on a copy; records
    which device did the work."""
    import cupy as cp

    y = cp.ones_like(block)
    n = block.size
    kernel(((n + 255) // 256,), (256,), (np.float32(a), block, y, np.int32(n)))
    # a worker of dask-cuda sees its one GPU as device 0: the PCI bus id tells them apart
    _DEVICES.append(cp.cuda.Device().pci_bus_id)
    return y


_DEVICES: list[str] = []


def _devices_seen():
    return sorted(set(_DEVICES))


@pytest.mark.gpu
def test_local_cuda_cluster_map_blocks_on_two_gpus(module):
    """The GPU machine's two-GPU kind: dask-cuda's LocalCUDACluster, one worker per GPU, a
    CuPy-backed dask array of 16 chunks through a cudamagic kernel, equal to NumPy."""
    cp = pytest.importorskip("cupy")
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is not installed")
    import dask.array as da
    from distributed import Client

    from cudamagic.toolchain.device import driver

    if driver.device_count() < 2:
        pytest.skip("needs two GPUs (the device tool's nvidia-h200-x2 kind)")
    n = 1 << 20
    host = np.arange(n, dtype=np.float32)
    with dask_cuda.LocalCUDACluster(n_workers=2, dashboard_address=None,
                                    silence_logs=40) as cluster, Client(cluster) as client:
        x = da.from_array(host, chunks=n // 16).map_blocks(cp.asarray)
        y = x.map_blocks(_saxpy_block, module["saxpy<float>"], 2.5, dtype=np.float32)
        got = cp.asnumpy(y.compute())
        devices = client.run(_devices_seen)
    assert np.array_equal(got, np.float32(2.5) * host + np.float32(1))
    print(f"\nworkers and the devices that ran blocks: {devices}")
    seen = [d for per_worker in devices.values() for d in per_worker]
    assert len(devices) == 2 and len(set(seen)) == 2  # each worker on its own GPU did work


def test_a_pickled_module_carries_its_cubin_once(tmp_path):
    """Issue 48: a pickled module carried its CUBIN twice, in its entry record and in each report
    row's kernel image (125 866 bytes for a 58 072-byte CUBIN). The report's rows travel without
    their images; on arrival they read the arrived CUBIN's records (a cluster kernel's launch
    note, read off its records, is the same after the trip)."""
    source = ("template<class T> __global__ void saxpy(T a, T* x) { x[0] *= a; }\n"
              "__global__ void __cluster_dims__(2, 1, 1) paired(float* x) { x[0] = 1; }\n")
    module = cudamagic.build(source, ["saxpy<float>"], arch="sm_90", cache=tmp_path)
    blob = pickle.dumps(module)
    cubin = module.cubin
    # the CUBIN travels once (the record holds its bytes as they are): a run of its code
    # appears once in the pickle
    assert blob.count(cubin[200:264]) == 1, (len(blob), len(cubin))
    back = pickle.loads(blob)
    notes = {row.symbol: row.launch_note for row in module.report.rows}
    assert "cluster 2x1x1" in notes.values()
    assert {row.symbol: row.launch_note for row in back.report.rows} == notes
    assert all(row.image is not None for row in back.report.rows)
    # a tool run's child takes the module's record alone, with no report (cudamagic.pipeline.child)
    from cudamagic.pipeline.module import arrive

    alone = arrive(module.payload(), None)
    assert sorted(k.symbol for k in alone.kernels.values()) == sorted(notes)
