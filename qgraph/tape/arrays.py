"""The arrays a qgraph.Tape follows: every array its recorded calls passed, by memory identity
(backends.gradient_args.identity: a qgraph array, a NumPy view or a PyTorch tensor of the same
bytes are one array), which of them the calls wrote, and those written inside structs, through
which no gradient flows. It refuses, before the call runs, a call that would need a gradient to
pass through an array inside a struct, and seeds that do not name a followed float array."""

from __future__ import annotations

from ..autodiff.gradient_args import check_seed, has_struct_accesses, identity, shown, struct_arrays
from ..errors import QgraphError
from ..runtime.arrays import Ndarray

_FIX = "; pass that array as an argument of its own, or keep it out of what the loss depends on"


class FollowedArrays:
    """One tape's arrays (see the module docstring)."""

    def __init__(self) -> None:
        self.arrays: dict[tuple, object] = {}  # identity -> the array, as first passed
        self.names: dict[tuple, str] = {}  # identity -> how errors name it (its first parameter)
        self.written: set[tuple] = set()  # identities a recorded call wrote
        self.in_structs: dict[tuple, str] = {}  # identity -> the struct field (`s.a`) a recorded call wrote

    def add(self, src, k: int, a, found: tuple, written: bool) -> None:
        """Follow argument `k` of a recorded call of `src` (`found`: its identity)."""
        if found not in self.arrays:
            self.arrays[found] = a
            self.names[found] = f"'{src.params[k].name}' of kernel {src.name}"
        if written:
            self.written.add(found)

    def check_structs(self, src, args: tuple, keys: dict, who: str) -> None:
        """Arrays inside structs carry no gradient: a call that would need one to pass through such
        an array (written inside a struct and followed elsewhere, or read inside one after a recorded
        call wrote it) raises; the struct fields it writes are remembered."""
        if not self.in_structs and not has_struct_accesses(src):
            return
        written, read = struct_arrays(src, args)
        for path, a in read.items():
            if identity(a) in self.written or identity(a) in self.in_structs:
                raise QgraphError(f"{who}: it reads `{path}`, an array inside a struct that an earlier recorded call "
                                  f"wrote, and no gradient flows through arrays inside structs{_FIX}")
        for path, a in written.items():
            if identity(a) in self.arrays:
                raise QgraphError(f"{who}: it writes `{path}`, an array inside a struct that the recorded calls also "
                                  f"pass as {self.names[identity(a)]}; no gradient flows through arrays inside "
                                  f"structs{_FIX}")
        for k, found in keys.items():
            if found in self.in_structs:
                raise QgraphError(f"{who}: its argument '{src.params[k].name}' was written inside a struct "
                                  f"(`{self.in_structs[found]}`) by an earlier recorded call, and no gradient "
                                  f"flows through arrays inside structs{_FIX}")
        self.in_structs.update((identity(a), path) for path, a in written.items())

    def check_seed(self, a, seed) -> None:
        """A seed names a float array the tape can take a gradient of, and fits its shape."""
        check_seed(a, seed)
        if not isinstance(a, Ndarray) and identity(a) not in self.arrays:
            # what a PyTorch user writes (y.backward(gradient)), or a copy (loss.to_numpy()): name the array wanted
            wrote = sorted(self.names[k] for k in self.written if k in self.names)
            raise TypeError(f"Tape.backward: a seed is given for {shown(a)}, which no recorded call passed (a copy, "
                            "such as loss.to_numpy(), or a gradient?); give backward the array the recorded kernels "
                            "wrote the loss into, itself: tape.backward(loss) sets its gradient to ones, and "
                            "tape.backward(grads={loss: seed}) to another seed"
                            + (f" (the recorded calls wrote {', '.join(wrote[:4])}"
                               f"{', ...' if len(wrote) > 4 else ''})" if wrote else ""))
        if identity(a) in self.in_structs:
            raise QgraphError(f"Tape.backward: a seed is given for `{self.in_structs[identity(a)]}`, an array the "
                              "recorded calls wrote inside a struct; no gradient flows through arrays inside structs: "
                              "pass it as an argument of its own")

    def clear(self) -> None:
        self.arrays.clear()
        self.names.clear()
        self.written.clear()
        self.in_structs.clear()
