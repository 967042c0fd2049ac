"""A qgraph call on a stream that another library is capturing (torch.cuda.graph, CuPy's stream
capture, a cuda.core GraphBuilder).

A qgraph graph cannot be launched into a capture (the driver invalidates the capture), so such a
call launches its tasks one by one on the capturing stream: each becomes a kernel node of the
outer graph, with the call's argument values frozen in it. Replaying the outer graph re-runs
them on the same arrays and numbers (the static-argument rule of every captured graph), which
the caller keeps alive: qgraph does not hold them, since it cannot know when the outer graph
is last replayed. Compiling and loading code is not capturable, so a signature's first call
must come before the capture. Device control flow (graph_while and the qgraph.loop, cond and
repeat regions) needs conditional nodes, which the driver refuses in a child graph: such a
call adds its nodes straight to the capturing graph (whose owner may add nodes while the
capture runs), after the stream's capture dependencies, and makes its last nodes the new
ones. Where device loops run as the host fallback (before Hopper), such a call raises.
"""

from __future__ import annotations

from ..driver.nodes import capture_graph, relaxed_capture_mode, set_capture_dependencies
from ..errors import QgraphError
from ..graph_cache import TaskGraph
from ..lang.front.regions import control_regions
from ..runtime.call_hooks import BoundCall


def first_call_error(src, key: tuple) -> QgraphError:
    signature = ", ".join(f"{n}: {t}" for n, t in zip(src.param_names, key))
    return QgraphError(f"kernel {src.name}: the first call for ({signature}) is on a stream that is capturing a "
                       "graph, and compiling cannot be captured; call the kernel once before the capture (a "
                       "warm-up, as torch.cuda.graph recommends) or compile it with qgraph.compile(kernel, "
                       "*example_args)")


def control_flow_error(src, why: str | None) -> QgraphError:
    return QgraphError(f"kernel {src.name} has device control flow (graph_while, qgraph.loop, qgraph.cond or "
                       f"qgraph.repeat), which runs on the host here ({why}), so it cannot be recorded into "
                       "another library's stream capture. Call it outside the capture")


class CaptureRecorder:
    """Records a launcher's calls on capturing streams; owns what recorded graphs still use."""

    def __init__(self, launcher) -> None:
        self._launcher = launcher
        self._control_flow = any(True for _ in control_regions(launcher.src.body))
        self._recorded: list[TaskGraph] = []  # their loop state lives as long as the launcher
        self._eager: dict[tuple, object] = {}  # signature -> eager launches into the capturing stream

    def record(self, call: BoundCall) -> None:
        """A call on `call.stream`, which another library is capturing: record its tasks into that graph."""
        launcher, key, args, packs, stream = self._launcher, call.key, call.args, call.packs, call.stream
        if self._control_flow and launcher.while_mode != "device":
            raise control_flow_error(launcher.src, launcher.while_reason)
        spec = launcher.compiled(key)
        if spec is None:
            raise first_call_error(launcher.src, key)
        launcher.switch_to(spec)
        if self._control_flow:
            self._record_graph(spec, args, packs, stream)
            return
        run = self._eager.get(key)
        if run is None:
            run = self._eager[key] = spec.eager().run
        run(args, packs, stream)

    def _record_graph(self, spec, args: tuple, packs: tuple, stream: int) -> None:
        """Device control flow: the specialisation's nodes, conditional ones included, added straight
        to the capturing graph after the stream's capture dependencies."""
        graph, deps = capture_graph(stream)
        with relaxed_capture_mode():  # the loops' state is allocated on qgraph's stream, outside the capture
            recorded = spec.build_graph(args, packs, stream, self._launcher.stats, into=(graph, deps))
        self._recorded.append(recorded)
        set_capture_dependencies(stream, recorded.ends)

    def close(self) -> None:
        """Free the recorded graphs' loop state (the owners' graphs must not run any more)."""
        if self._recorded:
            self._launcher.device.synchronize()
            for recorded in self._recorded:
                recorded.close()
            self._recorded.clear()
        self._eager.clear()

