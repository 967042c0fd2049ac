"""LLVM IR straight from qgraph's generated code, without numba's typing and lowering.

The CPU's serial form (lang.cpu.serial_form) is a plain function of arrays and numbers: its
types follow from the arguments, so an emitter that types it with numba's rules and writes LLVM
IR compiles it in milliseconds where numba takes a tenth of a second or more. Code it does not
cover raises `NotEmittable` and numba compiles it as before.
"""

from .kinds import NotEmittable

__all__ = ["NotEmittable"]
