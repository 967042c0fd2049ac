"""`qgraph.distributed.Group`: the ranks of a torch.distributed process group, with the collectives a
decomposed solver needs (all-reduce, halo exchange), callable inside a @qgraph.graph step.

On CUDA the collectives run on NCCL through a communicator qgraph owns (driver/nccl.py; its id
is shared through the torch group): outside a step they are enqueued on the array's device
stream, in order with qgraph's kernels; inside a step they are captured into the step's graph,
also inside a graph_while step's device loop (capture/step_collective.py), so a solver to a
global tolerance loops on every GPU without returning to the host. On the CPU they run at once
through torch.distributed (gloo) on the arrays' memory.
"""

from __future__ import annotations

import numpy as np

from .. import runtime
from ..capture.step_collective import CollectiveCall
from ..driver import nccl
from ..lang import roles
from ..runtime.arrays import Ndarray
from ..runtime.call_hooks import current_body

_OPS = tuple(nccl.OPS)


class Group:
    """The ranks of a torch.distributed process group (the default group when None), each
    driving the arrays of its own device. Make it after `torch.distributed.init_process_group`
    on every rank, and call its collectives in the same order on every rank."""

    def __init__(self, process_group=None) -> None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("qgraph.distributed.Group needs torch.distributed.init_process_group(...) first "
                               "(torchrun sets up its environment: init_process_group('nccl') on cuda, 'gloo' on "
                               "cpu; or qgraph.examples.ranks.init_rank)")
        self._dist, self.process_group = dist, process_group
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        self._communicators: dict[int, nccl.Communicator] = {}  # CUDA device ordinal -> this rank's
        self.closed = False

    def __repr__(self) -> str:
        return f"qgraph.distributed.Group(rank={self.rank}, world={self.world})"

    # ------------------------------------------------------------------ collectives

    def all_reduce(self, array: Ndarray, op: str = "sum") -> None:
        """Every rank's `array` becomes the elementwise `op` ("sum", "prod", "max", "min") of all ranks'."""
        self._check(array, "array")
        if op not in _OPS:
            raise ValueError(f"all_reduce: op={op!r}; use one of {', '.join(map(repr, _OPS))}")
        if self.world == 1:
            return
        code = nccl.OPS[op]

        def enqueue(stream: int, a=array) -> None:
            self._communicator(a).all_reduce(a.address, a.size, nccl.dtype_code(a.dtype), code, stream)

        key = ("all_reduce", id(self), op, array.address, array.size, array.dtype.str)
        self._submit(CollectiveCall(self._cpu_all_reduce, (array, op), key, enqueue, f"all_reduce({op!r})"))

    def exchange_rows(self, array: Ndarray, width: int = 1) -> None:
        """The halo exchange of a decomposition by rows (the first axis): this rank's rows
        [width, 2*width) go to rank - 1, which receives them in its last `width` rows, and its
        rows [n - 2*width, n - width) to rank + 1, into that rank's first `width` rows."""
        self._check(array, "array")
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise ValueError(f"exchange_rows: width={width!r}; give a positive int (halo rows on each side)")
        if array.ndim < 1 or array.shape[0] < 4 * width:
            raise ValueError(f"exchange_rows: array of shape {array.shape} has fewer than {4 * width} rows "
                             f"(two halos and two edges of width={width}); give each rank more rows")
        if self.world == 1:
            return
        pairs = self._row_pairs(array, width)

        def enqueue(stream: int, a=array) -> None:
            row = a.size // a.shape[0] * a.dtype.itemsize
            self._communicator(a).send_recv([(kind, a.address + first * row, rows * row // a.dtype.itemsize, peer)
                                             for kind, first, rows, peer in pairs], nccl.dtype_code(a.dtype), stream)

        key = ("exchange_rows", id(self), width, array.address, array.shape, array.dtype.str)
        self._submit(CollectiveCall(self._cpu_exchange_rows, (array, width), key, enqueue,
                                    f"exchange_rows(width={width})"))

    roles.mark(all_reduce, roles.COLLECTIVE)  # what the kernel front end rejects (lang.front.reports)
    roles.mark(exchange_rows, roles.COLLECTIVE)

    def barrier(self) -> None:
        """Wait for every rank (and this rank's queued device work): on the host, never in a step."""
        runtime.sync()
        self._dist.barrier(group=self.process_group)

    def close(self) -> None:
        """Release this rank's NCCL communicators, after qgraph.sync(); a step graph holding this
        group's collectives must not run again."""
        runtime.sync()
        for comm in self._communicators.values():
            comm.abort()
        self._communicators.clear()
        self.closed = True

    # ------------------------------------------------------------------ shared

    def _row_pairs(self, array: Ndarray, width: int) -> list[tuple[str, int, int, int]]:
        """(send or recv, first row, rows, peer group rank) of this rank's halo exchange."""
        n, pairs = array.shape[0], []
        if self.rank > 0:
            pairs += [("send", width, width, self.rank - 1), ("recv", 0, width, self.rank - 1)]
        if self.rank < self.world - 1:
            pairs += [("send", n - 2 * width, width, self.rank + 1), ("recv", n - width, width, self.rank + 1)]
        return pairs

    def _check(self, array, name: str) -> None:
        if self.closed:
            raise RuntimeError(f"{self!r} was closed; make a new Group")
        if not isinstance(array, Ndarray):
            raise TypeError(f"{name}: a qgraph array (qgraph.ndarray / qgraph.from_numpy), got {type(array).__name__}")
        if array.device == "cuda":
            nccl.dtype_code(array.dtype)

    def _submit(self, call: CollectiveCall) -> None:
        """Record the collective in the step being run (its graph holds it), or run it now."""
        body = current_body()
        cuda = call.args[0].device == "cuda"
        if cuda:
            self._communicator(call.args[0])  # made now, on every rank at once: never inside a capture
        if body is not None and (body.trace is not None or cuda):
            body.calls.append(call)  # on the CPU a traced run keeps it too: a replay runs it in order
            if cuda:
                return
        if cuda:
            call.enqueue(call.args[0].cuda_device.stream_handle)
        else:
            call.fn(*call.args)

    def _communicator(self, array: Ndarray) -> nccl.Communicator:
        """This rank's NCCL communicator on the array's device (made at its first collective, on
        every rank: the id goes from the group's first rank through torch.distributed)."""
        ordinal = array.device_id
        array.cuda_device.ensure_current()  # NCCL (the CUDA runtime) works on the current context's device
        comm = self._communicators.get(ordinal)
        if comm is None and self._communicators:
            raise ValueError(f"{self!r}: this rank's collectives use cuda:{next(iter(self._communicators))}, and "
                             f"this array is on cuda:{ordinal}; a rank drives one device (one process per GPU)")
        if comm is None:
            import torch

            uid = [nccl.new_unique_id() if self.rank == 0 else None]
            src = self._dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
            device = torch.device("cuda", ordinal) if self._dist.get_backend(self.process_group) == "nccl" else None
            self._dist.broadcast_object_list(uid, src=src, group=self.process_group, device=device)
            comm = self._communicators[ordinal] = nccl.Communicator(uid[0], self.world, self.rank)
        return comm

    # ------------------------------------------------------------------ the CPU (gloo)

    def _tensor(self, array: Ndarray):
        import torch

        return torch.from_numpy(np.asarray(array.host))

    def _cpu_all_reduce(self, array: Ndarray, op: str) -> None:
        ops = {"sum": self._dist.ReduceOp.SUM, "prod": self._dist.ReduceOp.PRODUCT,
               "max": self._dist.ReduceOp.MAX, "min": self._dist.ReduceOp.MIN}
        self._dist.all_reduce(self._tensor(array), op=ops[op], group=self.process_group)

    def _cpu_exchange_rows(self, array: Ndarray, width: int) -> None:
        dist, t = self._dist, self._tensor(array)
        peer = (lambda r: dist.get_global_rank(self.process_group, r)) if self.process_group is not None \
            else (lambda r: r)
        ops = [dist.P2POp(dist.isend if kind == "send" else dist.irecv, t[first:first + rows], peer(p),
                          self.process_group) for kind, first, rows, p in self._row_pairs(array, width)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
