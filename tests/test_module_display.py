"""How a module shows as a cell's value (a cell ending in ``cuda_module`` or
``cuda_module.load()``): as its report shows itself, the first rows and how many more, in text
as in HTML, whatever the number of kernels."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.errors import NameResolutionError
from cudamagic.view.report import SHOWN_ROWS

SOURCE = "template <int N> __global__ void k(float* x) { x[0] = N; }"


class _Printer:
    def __init__(self) -> None:
        self.out: list[str] = []

    def text(self, s: str) -> None:
        self.out.append(s)


@pytest.mark.parametrize("n", [1, SHOWN_ROWS, SHOWN_ROWS + 1, 3 * SHOWN_ROWS])
def test_a_module_shows_the_rows_its_report_shows(tmp_path, n):
    mod = cudamagic.build(SOURCE, name_expressions=[f"k<{i}>" for i in range(n)],
                          cache=str(tmp_path))
    p = _Printer()
    mod._repr_pretty_(p, False)
    text = "".join(p.out)
    shown = [i for i in range(n) if f"k<{i}>" in text]
    assert shown == list(range(min(n, SHOWN_ROWS)))
    more = [ln for ln in text.splitlines() if ln.startswith("  ... ")]
    assert len(more) == (n > SHOWN_ROWS)
    assert all(str(n - SHOWN_ROWS) in ln for ln in more)
    assert text == "".join(_shown(mod.report))
    html = mod._repr_html_()
    assert [i for i in range(n) if f"k&lt;{i}&gt;" in html] == list(range(min(n, SHOWN_ROWS)))


def _shown(report) -> list[str]:
    p = _Printer()
    report._repr_pretty_(p, False)
    return p.out


# --- a module is a Mapping of name expressions to kernels ------------------------------------

_HELD = 'extern "C" __global__ void fill(float* x) {}\ntemplate <class T> __global__ void t(T* x) {}\n'

# a key -> (key in module, module.get(key, "none") is a kernel)
MAPPING = {"fill": (True, True), "t<float>": (True, True), "t<int>": (False, False),
           "fil": (False, False), "": (False, False), 3: (False, False),
           None: (False, False), b"fill": (False, False)}


@pytest.mark.parametrize("key", list(MAPPING), ids=repr)
def test_membership_and_get_answer_as_a_mapping(tmp_path, key):
    """``"x" in module`` and ``module.get(x, default)`` raised NameResolutionError; a Mapping
    answers False and the default."""
    import cudamagic

    module = cudamagic.build(_HELD, ["t<float>"], cache=tmp_path)
    held, found = MAPPING[key]
    assert (key in module) is held
    got = module.get(key, "none")
    assert (got != "none") is found
    if found:
        assert got is module[key]


# a missing key -> what the Mapping protocol's users do with it: NameResolutionError was a
# LookupError and no KeyError, so each of these raised it instead of answering
MISSING = {
    "except KeyError": lambda m, k: _caught(lambda: m[k]),
    "str.format_map": lambda m, k: _caught(lambda: ("{%s}" % k).format_map(m)),
    "operator.itemgetter": lambda m, k: _caught(lambda: __import__("operator").itemgetter(k)(m)),
}


def _caught(call) -> str:
    try:
        call()
    except KeyError as exc:
        return type(exc).__name__
    return "no error"


@pytest.mark.parametrize("use", list(MISSING))
@pytest.mark.parametrize("key", ["t<int>", "fil"])
def test_a_missing_kernel_is_a_key_error(tmp_path, use, key):
    import cudamagic

    module = cudamagic.build(_HELD, ["t<float>"], cache=tmp_path)
    assert MISSING[use](module, key) == "NameResolutionError"


def test_a_missing_kernels_message_is_bounded(tmp_path):
    """A 100 000-character key was quoted whole, and every kernel of the module listed."""
    import cudamagic

    source = "".join(f'extern "C" __global__ void k{i}(float* x) {{}}\n' for i in range(40))
    module = cudamagic.build(source, cache=tmp_path)
    with pytest.raises(NameResolutionError) as caught:
        module["k" * 100_000]
    said = str(caught.value)
    assert len(said) < 800 and "and 30 more (module.keys())" in said, said
    with pytest.raises(NameResolutionError) as caught:
        module.globals["v" * 100_000]
    assert len(str(caught.value)) < 800


# What a new user porting CuPy RawModule code met (from test_user_tries.py): CuPy's get_function
def test_rawmodule_code_finds_kernels_with_get_function(tmp_path):
    # CuPy: mod = cp.RawModule(code=..., name_expressions=[...]); mod.get_function("saxpy<float>")
    source = (r'template <typename T> __global__ void saxpy(T a, T* y) { y[0] *= a; }'
              '\nextern "C" __global__ void fill(float* x) { x[0] = 1.0f; }')
    module = cudamagic.build(source, ["saxpy<float>"], arch="sm_90", cache=tmp_path)
    assert module.get_function("saxpy<float>") is module["saxpy<float>"]
    assert module.get_function("fill").symbol == "fill"
    with pytest.raises(NameResolutionError, match="saxpy<float>"):
        module.get_function("saxpy<double>")
