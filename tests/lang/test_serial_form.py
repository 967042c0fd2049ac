"""The CPU serial form (lang.cpu.serial_form): calls on one numba thread or over small arrays run
one serial function, larger calls the parallel form (on one thread too from the work of one chunk
of its loops); both give NumPy's results."""

import numba
import numpy as np
import pytest

import qgraph
from qgraph.backends import cpu_forms


def _mixed(x, y, total, hist, bins, scale, passes, steps, flag):
    for i in range(x.shape[0]):  # elementwise
        y[i] = x[i] * scale + 1.0
    for i in range(x.shape[0]):  # a reduction into a 0-d array
        total[()] += y[i]
    for i in range(x.shape[0]):  # an atomic scatter
        hist[int(x[i] * bins) % bins] += 1
    t = 1  # a local that is an int in this task ...
    y[0] = y[0] + scale * 2.0 + t
    for i in range(x.shape[0]):
        t = 0.5 * y[i]  # ... and a float in this one
        y[i] = t + scale
    for _ in qgraph.repeat(passes):
        for i in range(x.shape[0]):
            x[i] = x[i] * 0.5
    while qgraph.loop(flag):  # a device loop
        for i in range(x.shape[0]):
            x[i] = x[i] + 1.0
        steps[0] += 1
        flag[0] = 1 if steps[0] < 4 else 0


serial_first = qgraph.kernel(_mixed)
parallel_always = qgraph.kernel(_mixed, cpu_serial_below=0)


def _reference(x, bins, scale):
    y = x * scale + 1.0
    total = y.sum()
    hist = np.bincount((x * bins).astype(np.int64) % bins, minlength=bins)
    y[0] = y[0] + scale * 2.0 + 1
    y = 0.5 * y + scale
    x = x * 0.125 + 4.0
    return x, y, total, hist


def _call(kernel, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.random(n)
    args = (x.copy(), np.zeros(n), np.zeros(()), np.zeros(8, np.int64), 8, 1.5, 3, np.zeros(1, np.int64),
            np.ones(1, np.int32))
    kernel(*args)
    want_x, want_y, want_total, want_hist = _reference(x, 8, 1.5)
    np.testing.assert_allclose(args[0], want_x, rtol=1e-12)
    np.testing.assert_allclose(args[1], want_y, rtol=1e-12)
    np.testing.assert_allclose(args[2], want_total, rtol=1e-12)
    np.testing.assert_array_equal(args[3], want_hist)
    assert args[7][0] == 4


@pytest.fixture
def never_heavy(monkeypatch):
    """No first call is timed as heavy: the form follows the sizes alone, whatever the machine's load."""
    monkeypatch.setattr(cpu_forms, "HEAVY_PASS_S", float("inf"))


@pytest.mark.parametrize("kernel", [serial_first, parallel_always], ids=["serial", "parallel"])
def test_both_forms_give_numpys_results(cpu, never_heavy, kernel):
    _call(kernel, 1000, 1)
    assert kernel.stats.parallel_forms == (1 if kernel is parallel_always else 0)


def test_a_large_call_on_several_threads_runs_the_parallel_form(cpu, all_numba_threads, never_heavy):
    if all_numba_threads < 2:
        pytest.skip("numba has one thread here: every call runs the serial form")
    kernel = qgraph.kernel(_mixed, cpu_serial_below=2000)
    _call(kernel, 1000, 2)  # small: the serial form
    assert kernel.stats.parallel_forms == 0
    _call(kernel, 3000, 3)  # large: the same signature's parallel form, compiled now
    assert kernel.stats.parallel_forms == 1
    _call(kernel, 1000, 4)  # small again: the serial form
    _call(kernel, 3000, 5)
    assert (kernel.stats.parallel_forms, kernel.stats.specialisations) == (1, 1)


def test_compile_after_a_small_call_compiles_the_parallel_form_too(cpu, all_numba_threads, never_heavy):
    """kernel.compile(large arrays) after a small call compiled the serial form: the parallel form is
    compiled then, not in the middle of the large call (where a compile is deaf to kernel.cancel())."""
    if all_numba_threads < 2:
        pytest.skip("numba has one thread here: every call runs the serial form")
    kernel = qgraph.kernel(_mixed, cpu_serial_below=2000)
    _call(kernel, 1000, 2)  # small: the serial form alone
    assert kernel.stats.parallel_forms == 0
    n = 3000
    kernel.compile(np.zeros(n), np.zeros(n), np.zeros(()), np.zeros(8, np.int64), 8, 1.5, 3, np.zeros(1, np.int64),
                   np.ones(1, np.int32))
    assert kernel.stats.parallel_forms == 1
    _call(kernel, n, 3)  # large: runs the parallel form compiled above
    assert (kernel.stats.parallel_forms, kernel.stats.specialisations) == (1, 1)


@pytest.mark.parametrize("debug", [False, True])
def test_a_large_call_of_a_kernel_without_loops(cpu, all_numba_threads, never_heavy, debug):
    """The launch hands it to the parallel form itself (a kernel with device loops goes through its status)."""
    if all_numba_threads < 2:
        pytest.skip("numba has one thread here: every call runs the serial form")

    @qgraph.kernel(cpu_serial_below=100, debug=debug)
    def saxpy(y, x, a: float):
        for i in range(y.shape[0]):
            y[i] = a * x[i] + y[i]

    rng = np.random.default_rng(7)
    for n in (50, 300, 50, 300):
        x, y = rng.random(n), rng.random(n)
        want = 2.5 * x + y
        saxpy(y, x, 2.5)
        np.testing.assert_allclose(y, want, rtol=1e-15)
    assert (saxpy.stats.specialisations, saxpy.stats.parallel_forms) == (1, 1)
    if debug:  # a bad index in the parallel form is reported as in the serial one
        with pytest.raises(IndexError):
            saxpy(np.zeros(300), np.zeros(299), 1.0)


@pytest.mark.parametrize("heavy", [False, True])
def test_a_first_call_timed_heavy_moves_to_the_parallel_form(cpu, all_numba_threads, monkeypatch, heavy):
    """Small arrays but much work per element (an all-pairs step) run faster on threads: the second call
    the serial form runs is timed, and a pass of HEAVY_PASS_S or longer moves the signature for good."""
    if all_numba_threads < 2:
        pytest.skip("numba has one thread here: every call runs the serial form")
    monkeypatch.setattr(cpu_forms, "HEAVY_PASS_S", 0.0 if heavy else float("inf"))
    kernel = qgraph.kernel(_mixed)
    for seed in (8, 9, 10):
        _call(kernel, 500, seed)
    assert (kernel.stats.specialisations, kernel.stats.parallel_forms) == (1, int(heavy))


def test_a_large_call_on_one_thread_stays_serial(cpu):
    kernel = qgraph.kernel(_mixed, cpu_serial_below=2000)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        _call(kernel, 3000, 6)
    finally:
        numba.set_num_threads(threads)
    assert kernel.stats.parallel_forms == 0


def test_a_call_of_a_first_chunks_work_runs_the_parallel_form_on_one_thread_too(cpu):
    """The serial form's loops have no chunks, so a call where the parallel form's first chunk would
    not hold a whole loop runs the parallel form, whose chunks Ctrl-C stops between."""
    from qgraph.lang.cpu.loops import FIRST_CHUNK_WORK

    kernel = qgraph.kernel(_mixed)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        _call(kernel, FIRST_CHUNK_WORK - 1, 11)
        assert kernel.stats.parallel_forms == 0
        _call(kernel, FIRST_CHUNK_WORK, 12)
    finally:
        numba.set_num_threads(threads)
    assert (kernel.stats.specialisations, kernel.stats.parallel_forms) == (1, 1)


def test_compile_prepares_both_forms(cpu):
    kernel = qgraph.kernel(_mixed)
    x = np.zeros(10)
    qgraph.compile(kernel, x, x, np.zeros(()), np.zeros(8, np.int64), 8, 1.5, 3, np.zeros(1, np.int64),
                   np.ones(1, np.int32))
    assert (kernel.stats.specialisations, kernel.stats.parallel_forms) == (1, 1)


def test_inspect_shows_the_serial_form_as_one_function(cpu):
    x = np.zeros(10)
    code = serial_first.inspect(x, x, np.zeros(()), np.zeros(8, np.int64), 8, 1.5, 3, np.zeros(1, np.int64),
                                np.ones(1, np.int32))
    (label, source), = ((k, v) for k, v in code.host.items() if k.startswith("serial form"))
    assert "4096 elements" in label
    assert source.count("def ") == 1 and "_qg_prange" not in source and "_qg_unit" not in source
    # too large: the parallel form's status, before any task (passes of its repeat and interchanged repeat)
    assert "return (6, -1, _qg_n0, _qg_n1)" in source


def test_bad_thresholds_name_the_option():
    with pytest.raises(ValueError, match="cpu_serial_below must be a non-negative int"):
        qgraph.kernel(_mixed, cpu_serial_below=-1)
    with pytest.raises(ValueError, match="cpu_serial_below must be a non-negative int"):
        qgraph.kernel(_mixed, cpu_serial_below=True)
    from qgraph.runtime.settings import Settings

    with pytest.raises(qgraph.QgraphError, match="QGRAPH_CPU_SERIAL_BELOW='many': expected a non-negative integer"):
        Settings.from_environ({"QGRAPH_CPU_SERIAL_BELOW": "many"})
    assert Settings.from_environ({"QGRAPH_CPU_SERIAL_BELOW": "0"}).cpu_serial_below == 0
    assert Settings.from_environ({}).cpu_serial_below == 4096
