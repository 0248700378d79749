"""The shell's part of the debugging loop, in a real IPython InteractiveShell with the real
exception classes (CuPy's CUDARuntimeError is made from its status without a GPU): a lost
CUDA context explained wherever it surfaces, composing with other extensions' hooks; the
printf flush after a printing launch; %cuda_sanitize / %cuda_profile reading their lines;
%cuda_info naming the tools and a lost context.
"""

from __future__ import annotations

import pytest

from cudamagic.errors import ArgumentValueError, ContextPoisonedError, NoDeviceError, \
    OptionError
from cudamagic.launch import launcher as launcher_module
from cudamagic.launch.calls import read_calls
from cudamagic.launch.tool_run import SANITIZE_SYNTAX
from cudamagic.toolchain.device import driver

from .planted import PLANTED, PRINTF_SOURCE

cupy_runtime = pytest.importorskip("cupy_backends.cuda.api.runtime")
bindings = pytest.importorskip("cuda.bindings.driver")
rt = pytest.importorskip("cuda.bindings.runtime")


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    from IPython.core.interactiveshell import InteractiveShell

    from .conftest import fresh_shell

    ip = fresh_shell()
    shown: list = []
    # another extension's wrapper, there first: ours must call it, and it must see the advice
    original = ip._showtraceback

    def recorder(etype, evalue, stb):
        shown.append((etype, evalue, list(stb)))
        return original(etype, evalue, stb)

    ip._showtraceback = recorder
    ip.shown = shown
    mp = pytest.MonkeyPatch()
    mp.setenv("CUDAMAGIC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_line_magic("reload_ext", "cudamagic")  # twice: the hooks are installed once
    ip.run_cell("%%cuda -q\n" + PLANTED[0].source)
    ip.run_cell("%%cuda -q --module printing\n" + PRINTF_SOURCE)
    yield ip
    mp.undo()
    InteractiveShell.clear_instance()


@pytest.fixture
def last_launch(shell, fresh_process):
    launcher_module.LAST_LAUNCH[0] = (shell.user_ns["oob_write"], (1,), (256,))


def _advice_of(shell, code: str) -> list[str]:
    shell.shown.clear()
    shell.user_ns.update(RuntimeErr=cupy_runtime.CUDARuntimeError, CUresult=bindings.CUresult,
                         cudaError_t=rt.cudaError_t, Poisoned=ContextPoisonedError)
    shell.run_cell(code)
    (_, _, stb), = shell.shown
    return [line for line in stb if "cudamagic:" in line]


@pytest.mark.parametrize("code, device_word", [
    ("raise RuntimeErr(710)", "ASSERT"),  # CuPy at synchronize after a device assert
    ("raise RuntimeErr(700)", "ILLEGAL_ADDRESS"),
    ("raise RuntimeErr(719)", "LAUNCH_FAILED"),
    ("raise RuntimeErr(716)", "MISALIGNED_ADDRESS"),
    ("raise RuntimeError(CUresult.CUDA_ERROR_ILLEGAL_ADDRESS)", "ILLEGAL_ADDRESS"),  # bindings
    ("raise RuntimeError('failed', cudaError_t.cudaErrorAssert)", "ASSERT"),
    ("try:\n    raise RuntimeErr(715)\nexcept Exception as e:\n    raise ValueError('wrapped')"
     " from e", "ILLEGAL_INSTRUCTION"),  # another library wrapping it
])
def test_a_lost_context_is_explained_wherever_it_surfaces(shell, last_launch, code,
                                                          device_word):
    advice = "\n".join(_advice_of(shell, code))
    assert f"CUDA_ERROR_{device_word}" in advice
    assert "every CUDA call in this process now fails" in advice
    assert "restart the notebook kernel" in advice
    assert "oob_write.sanitize((1,), (256,), args)" in advice
    assert driver.lost_contexts()  # %cuda_info shows it from here on
    info = str(shell.run_line_magic("cuda_info", ""))
    assert "LOST: the CUDA context of" in info


@pytest.mark.parametrize("code", [
    "raise ValueError('not CUDA')",
    "raise RuntimeErr(2)",  # out of memory: not sticky
    "raise RuntimeError(CUresult.CUDA_ERROR_INVALID_VALUE)",
    "raise OSError(700, 'a number that is no CUDA status')",
    # cudamagic's own error says it in its message: nothing is added twice
    "raise Poisoned('launching k failed: the CUDA context of device 0 is lost', 710, 0)",
])
def test_other_errors_get_no_advice(shell, last_launch, code):
    assert _advice_of(shell, code) == []


def test_it_composes_with_a_custom_exception_handler(shell, last_launch):
    seen = []

    def handler(self, etype, value, tb, tb_offset=None):
        seen.append(etype)
        self.showtraceback((etype, value, tb), tb_offset=tb_offset)

    shell.set_custom_exc((cupy_runtime.CUDARuntimeError,), handler)
    try:
        advice = _advice_of(shell, "raise RuntimeErr(710)")
    finally:
        shell.set_custom_exc((), None)
    assert seen == [cupy_runtime.CUDARuntimeError]
    assert any("oob_write.sanitize" in line for line in advice)


def test_the_hooks_are_installed_once(shell):
    from cudamagic.shell.magic import _flush_device_output

    assert shell.events.callbacks["post_run_cell"].count(_flush_device_output) == 1
    assert shell._cudamagic_debug_hooks


def test_a_printing_kernels_launcher_flags_the_flush_and_others_do_not(shell):
    hello, silent = shell.user_ns["hello"], shell.user_ns["silent"]
    assert hello.prints and not silent.prints
    assert "PRINTED[0] = True" in hello._make_launcher((1,)).source
    assert "PRINTED" not in silent._make_launcher((None,)).source.replace("PRINTED =", "")


def test_the_flush_after_a_printing_cell_waits_for_the_device_once(shell, monkeypatch):
    calls = []
    monkeypatch.setattr(driver, "synchronize", lambda: calls.append(1))
    launcher_module.PRINT_PENDING[0] = True
    shell.run_cell("x = 1")
    shell.run_cell("y = 2")
    assert calls == [1] and launcher_module.PRINT_PENDING[0] is False


def test_a_fault_seen_by_the_flush_is_explained_in_that_cell(shell, last_launch, monkeypatch,
                                                             capsys):
    def fault():
        raise ContextPoisonedError("cuCtxSynchronize failed", int(driver.Sticky.ASSERT), 0)

    monkeypatch.setattr(driver, "synchronize", fault)
    launcher_module.PRINT_PENDING[0] = True
    shell.run_cell("z = 3")
    err = capsys.readouterr().err
    assert "CUDA_ERROR_ASSERT" in err and "oob_write.sanitize((1,), (256,), args)" in err


def test_sticky_numbers_are_the_drivers_and_the_runtimes():
    for code in driver.Sticky:
        assert bindings.CUresult(int(code)).name == f"CUDA_ERROR_{code.name}"
        assert int(rt.cudaError_t(int(code))) == int(code)


def test_cudamagics_own_fault_carries_its_code_and_device(monkeypatch, fresh_process):
    monkeypatch.setattr(driver, "_error_name", lambda s: ("CUDA_ERROR_ASSERT", "assert"))
    with pytest.raises(ContextPoisonedError, match="restart the notebook kernel") as info:
        driver.check(710, "launching k")
    assert info.value.code == 710 and driver.sticky_of(info.value) is driver.Sticky.ASSERT
    assert "CUDA_ERROR_ASSERT" in str(info.value) and not info.value.repeated
    assert "every CUDA call in this process now fails" in str(info.value)
    with pytest.raises(ContextPoisonedError) as again:  # said in full once, then short
        driver.check(710, "launching k2")
    assert again.value.repeated and "was lost earlier" in str(again.value)
    assert "every CUDA call" not in str(again.value)


@pytest.mark.parametrize("devices", [(-1, -1), (0, 0), (-1, 0), (0, -1)])
def test_a_loss_told_for_an_unknown_device_is_told_once(fresh_process, devices):
    """The device a loss is noted for is the current context's, -1 where none is current on
    the asking thread: on a GPU machine the first error came with none current and the second
    with CuPy's context made meanwhile (device 0), and the full advice was said twice."""
    assert [driver.first_telling(d) for d in devices] == [True, False]


def test_the_advice_is_said_in_full_once_then_in_one_line(shell, last_launch):
    first = _advice_of(shell, "raise RuntimeErr(710)")
    second = _advice_of(shell, "raise RuntimeErr(710)")
    assert any("oob_write.sanitize" in line for line in first)
    assert len(second) == 1 and "was lost earlier" in second[0]


# --- %cuda_sanitize / %cuda_profile --------------------------------------------------------------

def test_the_calls_keep_the_args_expressions_as_labels(shell):
    ns = dict(shell.user_ns, x=None, n=7)
    (call,) = read_calls("oob_write((1,), (256,), (x, n))", ns, SANITIZE_SYNTAX)
    assert call.arg_labels == ("x", "n") and call.args == (None, 7)


@pytest.mark.parametrize("line, error, says", [
    ("--tool valgrind oob_write((1,), (256,), (None, 1))", ArgumentValueError, "memcheck"),
    ("--bogus oob_write((1,), (256,), (None, 1))", OptionError, "not an option"),
    ("print((1,), (256,), (None, 1))", OptionError, "not a GPU kernel"),
    ("oob_write((1,), (256,), (None, 1), stream=0)", OptionError, "no stream"),
    ("oob_write((1,), (256,), (None, 1)); oob_write((1,), (256,), (None, 1.5))",
     Exception, "parameter 1"),  # the second call is checked before the first runs
    ("--uninitialized a oob_write((1,), (256,), (None, 1))", OptionError, "indices"),
    ("", OptionError, "no launch to sanitize"),
])
def test_a_bad_sanitize_line_is_refused_before_anything_starts(shell, line, error, says):
    with pytest.raises(error, match=says):
        shell.run_line_magic("cuda_sanitize", line)


def test_a_good_line_without_a_gpu_gets_no_device_error(shell):
    if driver.available():
        pytest.skip("a GPU is here")
    for magic in ("cuda_sanitize", "cuda_profile"):
        with pytest.raises(NoDeviceError):
            shell.run_line_magic(magic, "oob_write((1,), (256,), (None, 4096))")


def test_cuda_info_names_the_sanitizer_with_its_version(shell):
    info = str(shell.run_line_magic("cuda_info", ""))
    assert "compute-sanitizer: Version " in info
    assert "ncu: " in info


def test_the_report_has_a_sanitize_and_profile_fold(shell):
    from cudamagic.view.bench import debug_fold

    module = shell.user_ns["printing"]
    first = next(iter(module.kernels.entries()))[2]
    fold = debug_fold(module)
    assert f"{first}.sanitize(grid, block, args)" in fold and f"{first}.profile(" in fold
    assert "failed assert's message) of hello lands" in fold
    assert "silent" not in fold.split("printf")[1]
    assert "printf" not in debug_fold(shell.user_ns["cuda_module"])  # oob_write prints nothing


def test_the_report_shows_the_fold_in_a_notebook(shell, monkeypatch):
    import cudamagic.shell.magic as magic_module

    from comm import create_comm

    from cudamagic.view.widget import Frontend

    shown: list = []
    monkeypatch.setattr(magic_module, "frontend",
                        lambda shell: Frontend(shown.append, create_comm))
    shell.run_cell("%%cuda --module again\n" + PLANTED[0].source)
    html = "".join(b.get("text/html", "") for b in shown)
    assert "sanitize and profile" in html and "oob_write.sanitize(" in html
