"""The CUDA toolkit a build sees: header folders every build gets, and what identifies them.

Found without importing anything heavy (``cupy``'s import takes seconds): the package folders
come from ``importlib.util.find_spec``, the versions from the names of the installed
distributions' ``.dist-info`` folders, read in one listing per site-packages folder. Cheap on
purpose: it runs on the first build of every process, cache hits included.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Toolkit", "toolkit"]

# distributions that ship the headers every build sees (crt/mma.h: nvidia_cuda_crt;
# curand_kernel.h: nvidia_curand), the NVRTC that compiles, or the nvJitLink that links
_DISTS = ("cupy", "nvidia_cuda_runtime", "nvidia_cuda_nvrtc", "nvidia_cuda_cccl",
          "nvidia_cuda_crt", "nvidia_curand", "nvidia_nvjitlink")
_HOME_VARS = ("CUDA_HOME", "CUDA_PATH")


@dataclass(frozen=True)
class Toolkit:
    """Header folders and the identity of the packages that ship them.

    Attributes
    ----------
    include_dirs : tuple of str
        Folders every build searches after the user's ``-I``: CuPy's (``<cupy/complex.cuh>``
        and CCCL: ``<cuda/std/...>``, ``<cub/...>``, ``<thrust/...>``), then one toolkit folder
        with ``cuda_fp16.h`` (``$CUDA_HOME/include`` or the ``nvidia-cuda-runtime`` wheel's).
    distributions : tuple of str
        ``.dist-info`` names of the packages above and of NVRTC's wheel
        (``cupy_cuda13x-14.2.0.dist-info``...): a new version of any is a new toolkit.
    cuda_homes : tuple of str
        ``VAR:sha256-prefix`` of ``$CUDA_HOME/version.json`` (and ``$CUDA_PATH``'s).
    """

    include_dirs: tuple[str, ...]
    distributions: tuple[str, ...]
    cuda_homes: tuple[str, ...]

    @property
    def nvrtc_wheel(self) -> str | None:
        """The ``nvidia-cuda-nvrtc`` wheel's dist-info name (NVRTC is loaded from it), if any."""
        return next((d for d in self.distributions if d.startswith("nvidia_cuda_nvrtc")), None)

    @property
    def fingerprint(self) -> str:
        """One string for the cache key."""
        return ";".join((*self.distributions, *self.cuda_homes, *self.include_dirs))


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # finds without importing
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _include_dirs(cupy: Path | None, nvidia: Path | None) -> tuple[str, ...]:
    dirs: list[Path] = []
    if cupy:
        inc = cupy / "_core" / "include"
        cccl = inc / "cupy" / "_cccl"
        dirs += [inc, cccl / "libcudacxx", cccl / "cub", cccl / "thrust"]
    dirs = [d for d in dirs if d.is_dir()]
    # one toolkit header folder: the first that has cuda_fp16.h (two would shadow each other)
    toolkits = [Path(os.environ[v]) / "include" for v in _HOME_VARS if os.environ.get(v)]
    if nvidia:
        toolkits += sorted(nvidia.glob("cu*/include"), reverse=True)
    toolkits.append(Path("/usr/local/cuda/include"))
    dirs += [d for d in toolkits if (d / "cuda_fp16.h").is_file()][:1]
    return tuple(dict.fromkeys(str(d) for d in dirs))


@functools.lru_cache(maxsize=1)
def toolkit() -> Toolkit:
    """The toolkit of this process (looked up once)."""
    cupy, nvidia = _package_dir("cupy"), _package_dir("nvidia")
    dists: list[str] = []
    for site in sorted({d.parent for d in (cupy, nvidia) if d is not None}):
        try:
            dists += sorted(n for n in os.listdir(site)
                            if n.endswith(".dist-info") and n.startswith(_DISTS))
        except OSError:
            continue
    homes = []
    for var in _HOME_VARS:
        version = Path(os.environ.get(var) or "/nonexistent", "version.json")
        if os.environ.get(var) and version.is_file():
            homes.append(f"{var}:" + hashlib.sha256(version.read_bytes()).hexdigest()[:16])
    return Toolkit(_include_dirs(cupy, nvidia), tuple(dists), tuple(homes))
