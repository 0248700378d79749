"""``-n "scale<float>"`` on a kernel that is not a template says that ``scale`` is not a
template (issue 31 item 3: NVRTC said only "type name is not allowed"). NVRTC is asked: after
the failed compile, the bare name alone as a name expression; a template, or a cell that fails
anyway, gets no such sentence."""

from __future__ import annotations

import pytest

import cudamagic
from cudamagic.errors import CompileError

PLAIN = "__global__ void scale(float* x, float a) { x[0] *= a; }\n"
TEMPLATE = "template <typename T> __global__ void saxpy(T* x) { x[0] += 1; }\n"

# label: (source, name expressions, whether the message must say the bare name is no template)
CASES = {
    "plain kernel given template arguments": (PLAIN, ["scale<float>"], "scale"),
    "plain kernel in a namespace": ("namespace ops {\n" + PLAIN + "}\n", ["ops::scale<int>"],
                                    "ops::scale"),
    "a template given a type that does not exist": (TEMPLATE, ["saxpy<floaty>"], None),
    "a template, and an error elsewhere in the cell": (TEMPLATE + "int broken = ;\n",
                                                       ["saxpy<float>"], None),
}


@pytest.mark.parametrize("label", list(CASES))
def test_a_plain_kernel_named_with_template_arguments_is_said_to_be_no_template(label):
    source, names, bare = CASES[label]
    with pytest.raises(CompileError) as err:
        cudamagic.build(source, names, use_cache=False)
    text = str(err.value)
    if bare is None:
        assert "is not a template" not in text, text
    else:
        assert f'hint: {bare} is not a template: -n "{names[0]}"' in text, text
        assert text.index("is not a template") < text.index("error:")  # the answer first
