"""How cudamagic's errors show in a notebook: the message without Python's stack, and, where
the error came through the user's own functions, where their code was (a kernel called with
bad arguments inside a helper said only "takes 3 arguments, got 2": a new user could not find
which call). Run in a real IPython shell, its own rendering (``_render_traceback_``) shown."""

from __future__ import annotations

import json
import textwrap

import pytest

from .conftest import run_python

KERNEL_CELL = ('%%cuda -n "tmul<float>"\ntemplate <typename T> __global__ void tmul(T* y, T a, '
               'int n) { y[0] = a * n; }\n')

#: (the cells after the kernel's, what the shown error must hold, what it must not)
CASES = {
    "a call in the cell": (["tmul_float((1,), (32,), (None, 2.0))"],
                           ["ArgumentTypeError: tmul<float> takes 3 arguments"],
                           ["Where your code was", "launch_kernel", "interactiveshell"]),
    "a call in helpers": (["def step(y): tmul_float((1,), (32,), (y, 2.0))\n"
                           "def outer(): step(None)", "outer()"],
                          ["ArgumentTypeError: tmul<float> takes 3 arguments",
                           "Where your code was (most recent call last):", ", in outer",
                           "def outer(): step(None)", ", in step",
                           "def step(y): tmul_float((1,), (32,), (y, 2.0))"],
                          ["launch_kernel", "interactiveshell", "cudamagic/"]),
    "a compile error of the magic": (['%%cuda\n__global__ void k(float* y) { y[0] = nope; }\n'],
                                     ['CompileError: NVRTC could not compile cell.cu',
                                      'identifier "nope" is undefined'],
                                     ["Where your code was", "decorator-gen", "shell/magic.py"]),
    # issue 51 snag 5: it ended with run_cell_magic and a dataclass's "<string>" __init__
    "a refused magic line": (["%%cuda --arch sm_1\n__global__ void k() {}\n"],
                             ["OptionError: --arch 'sm_1' is not a real GPU architecture"],
                             ["Where your code was", "<string>", "run_cell_magic"]),
    "build() in a function": (['import cudamagic\ndef f():\n    return cudamagic.build('
                               '"__global__ void k(float* y) { y[0] = nope; }")', "f()"],
                              ["CompileError: NVRTC could not compile", ", in f",
                               "Where your code was"],
                              ["pipeline/steps.py", "interactiveshell"]),
    "a call from a thread pool": (["from concurrent.futures import ThreadPoolExecutor\n"
                                   "def work(y): return tmul_float((1,), (32,), (y, 2.0))\n"
                                   "with ThreadPoolExecutor(1) as pool:\n"
                                   "    pool.submit(work, None).result()"],
                                  ["ArgumentTypeError: tmul<float> takes 3 arguments",
                                   ", in work"],
                                  ["concurrent/futures", "threading.py"]),
    "a very long line": (["def far(y): " + "0 or " * 20000 + "tmul_float((1,), (32,), (y,))\n"
                          "far(None)"],
                         ["ArgumentTypeError", ", in far", "..."],
                         ["0 or " * 100]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_error_shows_its_message_and_where_the_users_code_was(case, tmp_path):
    cells, shown, hidden = CASES[case]
    out = run_python(textwrap.dedent(f"""
        import json
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_cell("%load_ext cudamagic")
        ip.run_cell({KERNEL_CELL!r})
        shown = []
        ip._showtraceback = lambda etype, value, stb: shown.append("\\n".join(stb))
        for cell in {cells!r}:
            ip.run_cell(cell)
        print("SHOWN " + json.dumps(shown))
    """), env={"CUDAMAGIC_CACHE_DIR": str(tmp_path / "cache")})
    shown_text = "\n".join(json.loads(out.split("SHOWN ", 1)[1].strip().splitlines()[0]))
    for words in shown:
        assert words in shown_text, shown_text
    for words in hidden:
        assert words not in shown_text, shown_text


def test_rendering_never_raises():
    """An error whose message cannot be made (a subclass of the user's) still renders."""
    from cudamagic.errors import CudaMagicError

    class Odd(CudaMagicError):
        def __str__(self):
            raise RuntimeError("no")

    lines = Odd()._render_traceback_()
    assert lines[0].startswith("Odd: (its message could not be made: RuntimeError)"), lines
