"""module.globals (issue 31 item 4): still a tuple in the CUBIN's order (code that indexes or
iterates it keeps working), looked up by name as well, with a repr that names a few and counts
the rest instead of printing every variable (a CCCL cell holds a thousand: a 414 KB repr)."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.errors import NameResolutionError
from cudamagic.toolchain import variables as V

SOURCE = "namespace ns { __device__ double scale; }\n" + "".join(
    f"__constant__ float c{i}[{i + 1}];\n" for i in range(30)) + (
    'extern "C" __global__ void k(float* x) { x[0] = c0[0] + c29[0] + ns::scale; }\n')


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    return cudamagic.build(SOURCE, cache=tmp_path_factory.mktemp("cache"))


def test_a_tuple_in_the_cubins_order_also_looked_up_by_name(module):
    g = module.globals
    assert isinstance(g, tuple) and len(g) == 31
    assert g[0] is tuple(g)[0] and list(g[:2]) == list(tuple(g)[:2])
    assert g["c3"].size == 16 and g["c3"] is next(v for v in g if v.name == "c3")
    assert g["ns::scale"].name == "_ZN2ns5scaleE" and g["_ZN2ns5scaleE"].cxx_name == "ns::scale"
    assert "c29" in g and "nothing" not in g and g[0] in g
    assert g.get("nothing") is None and g.get("c1").size == 8
    with pytest.raises(NameResolutionError, match="and 21 more"):
        g["nothing"]


def test_its_repr_names_a_few_and_counts_the_rest(module):
    text = repr(module.globals)
    assert text.startswith("<31 variables: ") and text.endswith(f"and {31 - V.SHOWN} more>")
    assert len(text) < 200, len(text)
    assert repr(V.Variables()) == "<0 variables>"
