"""The state blocks of qgraph's device-loop and branch helper kernels, described once.

A WHILE loop and an IF branch each keep a small block of 8-byte words in device memory: the
helper kernels (CUDA C++ below, compiled by NVRTC) read and write it, the host fills some
fields while it builds the graph and reads the pass count back. Each block is one table of
(field, meaning) here: `LoopState` and `BranchState` (ctypes structures) give Python its
offsets and size, and `HELPER_SOURCE` gets a C enum of the same fields' word indices, which
its kernels index the block with, so neither side can use an offset the other does not. The
loop modes and the branch's body bits are Python enums written into the C source as C enums.
"""

from __future__ import annotations

import ctypes
import enum
import functools


class LoopMode(enum.IntEnum):
    """How a device loop decides to run its body (the `mode` field of its state block)."""

    DO_WHILE = 0  # on a flag, body first (graph_while=)
    WHILE = 1  # on a flag, tested first (qgraph.loop)
    COUNT = 2  # a number of passes (qgraph.repeat)


class BranchBodies(enum.IntFlag):
    """Which of an IF branch's bodies have an IF node (the `bodies` field of its state block)."""

    THEN = 1
    ELSE = 2


LOOP_FIELDS = (
    ("flag_address", "the flag's device address (0 for a repeat loop)"),
    ("passes", "passes so far"),
    ("limit", "the runaway guard's limit (a repeat loop: its count)"),
    ("trip_record", "the host-mapped word the guard writes its pass count into"),
    ("handle", "the WHILE node's conditional handle"),
    ("mode", "a LoopMode"),
    ("stop_record", "debug mode's record (0: none): a failed check ends the loop"),
    ("live", "1 while the pass goes on: 0 once a check between unrolled copies stopped it"),
    ("cancel_word", "the kernel's [cancel, passes] words in device memory (0: none): non-zero cancel ends the loop"),
    ("clears_cancel", "1 for a loop no other loop encloses: its slot writer clears the cancel word as it starts"),
)

CANCELLED = 1 << 63  # in a trip record: the loop ended on its cancel word (the low bits: its passes)

BRANCH_FIELDS = (
    ("then_handle", "the conditional handle of the then body's IF node"),
    ("else_handle", "the conditional handle of the else body's IF node"),
    ("bodies", "which of them exist: BranchBodies bits"),
)


WORD = ctypes.sizeof(ctypes.c_uint64)  # every field is one word


class LoopState(ctypes.Structure):
    """A device loop's state block (LOOP_FIELDS; in C the QG_LOOP_* word indices)."""

    _fields_ = [(name, ctypes.c_uint64) for name, _ in LOOP_FIELDS]


class BranchState(ctypes.Structure):
    """An IF branch's state block (BRANCH_FIELDS; in C the QG_BRANCH_* word indices)."""

    _fields_ = [(name, ctypes.c_uint64) for name, _ in BRANCH_FIELDS]


# the helper kernels' parameter blocks: one word per parameter of their C signatures below
STORE_PARAMS = 3 * WORD  # (state, the flag's address, the guard's limit or the count)
CONDITION_PARAMS = 2 * WORD  # (the WHILE node's handle, state)
GATE_PARAMS = WORD  # (state)
BRANCH_PARAMS = 2 * WORD  # (state, the flag's address)


def c_words(prefix: str, layout: type[ctypes.Structure], fields: tuple) -> str:
    """`layout` for C: an enum of its words' indices (`<prefix>_<FIELD>`, the kernels index the
    block with them), each commented from `fields`, and `<prefix>_WORDS`."""
    lines = [f"// {prefix.lower()}_state: words of 8 bytes (qgraph/driver/loop_state.py: {layout.__name__})",
             f"enum {prefix.lower()}_word {{"]
    lines += [f"    {prefix}_{field.upper()} = {getattr(layout, field).offset // WORD},  // {meaning}"
              for field, meaning in fields]
    lines += [f"    {prefix}_WORDS = {ctypes.sizeof(layout) // WORD}", "};"]
    return "\n".join(lines)


def c_constants(prefix: str, members: type[enum.Enum]) -> str:
    """An enum's members as a C enum (constants without storage): `<prefix>_<MEMBER> = value`."""
    values = [f"{prefix}_{m.name} = {int(m.value)}" for m in members]
    return f"enum {prefix.lower()} : unsigned long long {{ {', '.join(values)} }};"


def write_field(device, block: int, field, value: int) -> None:
    """Set one field (`LoopState.handle`, ...) of the state block at device address `block`."""
    word = ctypes.c_uint64(value)
    device.copy_to_device(block + field.offset, ctypes.addressof(word), field.size)


_PREAMBLE = r"""
typedef unsigned long long cudaGraphConditionalHandle;
#ifndef CUDARTAPI
#define CUDARTAPI
#endif
extern "C" __device__ __cudart_builtin__ void CUDARTAPI cudaGraphSetConditional(
    cudaGraphConditionalHandle handle, unsigned int value);
"""

_STORE = r"""
extern "C" __global__ void qgraph_store_flag_address(unsigned long long* state, unsigned long long address,
                                                     unsigned long long limit)
{
    state[QG_LOOP_FLAG_ADDRESS] = address;
    state[QG_LOOP_PASSES] = 0;
    state[QG_LOOP_LIMIT] = limit;
    state[QG_LOOP_LIVE] = 1;
    if (state[QG_LOOP_CANCEL_WORD] && state[QG_LOOP_CLEARS_CANCEL]) {  // [cancel, passes]: a new call
        ((volatile unsigned long long*)state[QG_LOOP_CANCEL_WORD])[0] = 0;
        ((volatile unsigned long long*)state[QG_LOOP_CANCEL_WORD])[1] = 0;
    }
    unsigned long long mode = state[QG_LOOP_MODE];
    unsigned int go = mode == QG_LOOP_MODE_DO_WHILE ? 1u
                    : mode == QG_LOOP_MODE_WHILE ? (*(const int*)address != 0 ? 1u : 0u)
                                                     : ((long long)limit > 0 ? 1u : 0u);
    cudaGraphSetConditional(state[QG_LOOP_HANDLE], go);
}
"""

NEXT_PASS = r"""
// After a pass of the body: count it and say whether the next one runs (0 once `live` is 0: a copy
// of an unrolled body was skipped, so later copies, gates and the condition skip too). This 1-thread
// function is on the loop's critical path, where each serialised trip to memory costs about 0.2 us,
// so every load is issued before any decision: the block's words together (volatile, or the compiler
// sinks them behind the first test), then together the words they point at (the flag, the cancel
// word, debug's stop record): two trips a pass, whatever the loop checks. The cancel word is device
// memory (the host sets it through a stream of its own, runtime/cancel.py): an L2 read, never the bus.
__device__ unsigned int qgraph_next_pass(unsigned long long* state)
{
    const volatile unsigned long long* block = state;
    const unsigned long long live = block[QG_LOOP_LIVE], passes = block[QG_LOOP_PASSES] + 1;
    const unsigned long long mode = block[QG_LOOP_MODE], limit = block[QG_LOOP_LIMIT];
    const unsigned long long flag = block[QG_LOOP_FLAG_ADDRESS], stop = block[QG_LOOP_STOP_RECORD];
    volatile unsigned long long* const cancel = (volatile unsigned long long*)block[QG_LOOP_CANCEL_WORD];
    const unsigned long long clears = block[QG_LOOP_CLEARS_CANCEL];
    const int raised = flag ? *(volatile const int*)flag : 0;  // a repeat loop has no flag
    const long long stopped = stop ? *(volatile const long long*)stop : 0;
    const unsigned long long cancelled = cancel ? cancel[0] : 0;  // kernel.cancel() or Ctrl-C
    if (!live)
        return 0u;
    state[QG_LOOP_PASSES] = passes;
    if (cancel && clears)  // the host's progress bar reads the outermost loop's passes
        cancel[1] = passes;
    unsigned int go;
    if (stopped) {
        go = 0u;
    } else if (cancelled) {  // tell the host
        *(volatile unsigned long long*)block[QG_LOOP_TRIP_RECORD] = passes | QG_CANCELLED;
        go = 0u;
    } else if (mode == QG_LOOP_MODE_COUNT) {
        go = (long long)passes < (long long)limit ? 1u : 0u;
    } else {
        go = raised != 0 ? 1u : 0u;
        if (go && passes >= limit) {  // the runaway guard: stop, and tell the host
            go = 0u;
            *(volatile unsigned long long*)block[QG_LOOP_TRIP_RECORD] = passes;
        }
    }
    state[QG_LOOP_LIVE] = go;
    return go;
}
"""

_CONDITIONS = r"""
// The end of the body: `handle` is the WHILE node's, or between unrolled copies an IF node's.
extern "C" __global__ void qgraph_while_condition(cudaGraphConditionalHandle handle, unsigned long long* state)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");  // behind a programmatic edge: the body has finished
    cudaGraphSetConditional(handle, qgraph_next_pass(state));
}

// Between unrolled copies whose tasks read `live` themselves (their gated variant) and return at once when 0.
extern "C" __global__ void qgraph_loop_gate(unsigned long long* state)
{
    asm volatile("griddepcontrol.wait;" ::: "memory");
    qgraph_next_pass(state);
}

extern "C" __global__ void qgraph_set_branch(const unsigned long long* state, unsigned long long address)
{
    unsigned int taken = *(const int*)address != 0 ? 1u : 0u;
    if (state[QG_BRANCH_BODIES] & QG_BRANCH_BODY_THEN)
        cudaGraphSetConditional(state[QG_BRANCH_THEN_HANDLE], taken);
    if (state[QG_BRANCH_BODIES] & QG_BRANCH_BODY_ELSE)
        cudaGraphSetConditional(state[QG_BRANCH_ELSE_HANDLE], 1u - taken);
}
"""


def _state_words() -> str:
    """The state blocks' words and enums in C."""
    return "\n".join([c_words("QG_LOOP", LoopState, LOOP_FIELDS), c_constants("QG_LOOP_MODE", LoopMode),
                      c_words("QG_BRANCH", BranchState, BRANCH_FIELDS), c_constants("QG_BRANCH_BODY", BranchBodies),
                      f"enum qg_trip : unsigned long long {{ QG_CANCELLED = {CANCELLED}ull }};"])


def helper_source(next_pass: str = NEXT_PASS) -> str:
    """The helper kernels' module: the state blocks' words and enums, then the kernels, with
    `next_pass` as the condition and gate kernels' decision (benchmarks/watching.py measures a
    former one beside it)."""
    return "\n".join([_PREAMBLE, _state_words(), _STORE, next_pass, _CONDITIONS])


# qgraph_next_pass alone, with C linkage: NVRTC makes it a PTX .func that a task kernel ending a copy
# of an unrolled flag loop's body calls after its body, doing the gate's work (compiler.ptx_text.gating)
NEXT_PASS_SOURCE = "\n".join([_state_words(), 'extern "C" {', NEXT_PASS, "}"])
NEXT_PASS_FUNCTION = "qgraph_next_pass"


@functools.cache
def next_pass_ptx(cc: tuple[int, int]) -> str:
    """NEXT_PASS_SOURCE as PTX for compute capability `cc`: a .func to link (NVRTC, once a process)."""
    from . import nvrtc

    return nvrtc.compile_ptx(NEXT_PASS_SOURCE, "qgraph_next_pass.cu", tuple(cc), ("-rdc=true",))


# The slot writer, the WHILE condition and the branch kernel, indexing the state blocks above
HELPER_SOURCE = helper_source()
