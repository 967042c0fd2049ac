"""XLA's foreign function interface (its C ABI, xla/ffi/api/c_api.h) seen from ctypes: the one place
that knows its structs, so that qgraph.jax_op can hand XLA a handler written in Python.

XLA calls a handler with a call frame: the API table, an execution context (whose stream, on the
GPU, is the one the jitted program runs on), the argument and result buffers, and the attributes.
A handler returns NULL, or an error made through the API, which JAX raises at the program's call.
Before its first use XLA asks the handler for its metadata (API version, traits) through an
extension on the frame; the handler answers and returns.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

API_MAJOR, API_MINOR = 0, 1  # the fields read here exist since the interface's version 0.1
_METADATA = 1  # XLA_FFI_Extension_Metadata
_INVALID_ARGUMENT, _INTERNAL = 3, 13  # XLA_FFI_Error_Code
COMMAND_BUFFER_COMPATIBLE = 1  # XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE


class ExtensionBase(ctypes.Structure):
    pass


ExtensionBase._fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int),
                          ("next", ctypes.POINTER(ExtensionBase))]


class ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("major_version", ctypes.c_int), ("minor_version", ctypes.c_int)]


class Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("dtype", ctypes.c_int), ("data", ctypes.c_void_p), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


class _List(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets: the same layout
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("size", ctypes.c_int64), ("types", ctypes.POINTER(ctypes.c_int)),
                ("items", ctypes.POINTER(ctypes.c_void_p))]


class Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("size", ctypes.c_int64), ("types", ctypes.POINTER(ctypes.c_int)),
                ("names", ctypes.POINTER(ctypes.c_void_p)), ("attrs", ctypes.POINTER(ctypes.c_void_p))]


class Scalar(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("value", ctypes.c_void_p)]


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("message", ctypes.c_char_p), ("errc", ctypes.c_int)]


class StreamGetArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("ctx", ctypes.c_void_p), ("stream", ctypes.c_void_p)]


_ErrorCreate = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(ErrorCreateArgs))
_StreamGet = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(StreamGetArgs))


class Api(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("api_version", ApiVersion), ("internal_api", ctypes.c_void_p),
                ("error_create", _ErrorCreate), ("error_get_message", ctypes.c_void_p),
                ("error_destroy", ctypes.c_void_p), ("handler_register", ctypes.c_void_p),
                ("stream_get", _StreamGet)]


class CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", ctypes.POINTER(ExtensionBase)),
                ("api", ctypes.POINTER(Api)), ("ctx", ctypes.c_void_p), ("stage", ctypes.c_int),
                ("args", _List), ("rets", _List), ("attrs", Attrs)]


class Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", ApiVersion), ("traits", ctypes.c_uint32)]


class MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", ExtensionBase), ("metadata", ctypes.POINTER(Metadata))]


HANDLER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(CallFrame))
_BUFFER_P = ctypes.POINTER(Buffer)
_SCALAR_P = ctypes.POINTER(Scalar)
_INT64_P = ctypes.POINTER(ctypes.c_int64)
_HANDLERS: list = []  # every handler made: XLA keeps calling them, so they live as long as the process


class Frame:
    """One call's frame, read lazily: the call's number (its one int64 attribute), its buffers'
    addresses, and on the GPU the stream XLA runs the program on."""

    __slots__ = ("_frame",)

    def __init__(self, frame: CallFrame):
        self._frame = frame

    def call_number(self) -> int:
        attrs = self._frame.attrs
        return ctypes.cast(ctypes.cast(attrs.attrs[0], _SCALAR_P).contents.value, _INT64_P)[0]

    def arguments(self) -> list[int]:
        items = self._frame.args
        return [ctypes.cast(items.items[k], _BUFFER_P).contents.data or 0 for k in range(items.size)]

    def results(self) -> list[int]:
        items = self._frame.rets
        return [ctypes.cast(items.items[k], _BUFFER_P).contents.data or 0 for k in range(items.size)]

    def stream(self) -> int:
        frame = self._frame
        args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), None, frame.ctx, None)
        error = frame.api.contents.stream_get(ctypes.byref(args))
        if error:
            raise RuntimeError("XLA gave no stream for this call")
        return args.stream or 0


def _error(frame: CallFrame, message: str, code: int) -> int:
    args = ErrorCreateArgs(ctypes.sizeof(ErrorCreateArgs), None, message.encode("utf-8", "replace"), code)
    return frame.api.contents.error_create(ctypes.byref(args))


def make_handler(run: Callable[[Frame], None], what: str, command_buffers: bool):
    """An XLA FFI handler that answers the metadata query and otherwise calls `run(frame)`; an
    exception becomes XLA's error (with its type and message), which JAX raises at the call.
    `command_buffers`: the handler's launches may be recorded into XLA's CUDA graphs (run under
    a stream capture, for a given set of buffers, and replayed without calling the handler)."""
    traits = COMMAND_BUFFER_COMPATIBLE if command_buffers else 0

    def handler(pointer):
        frame = pointer.contents
        extension = frame.extension_start
        if extension and extension.contents.type == _METADATA:
            metadata = ctypes.cast(extension, ctypes.POINTER(MetadataExtension)).contents.metadata.contents
            metadata.api_version.major_version = API_MAJOR
            metadata.api_version.minor_version = API_MINOR
            metadata.traits = traits
            return None
        try:
            run(Frame(frame))
        except BaseException as error:  # noqa: B036 -- it cannot cross the C boundary: XLA reports it
            code = _INVALID_ARGUMENT if isinstance(error, (TypeError, ValueError)) else _INTERNAL
            return _error(frame, f"{what}: {type(error).__name__}: {error}", code)
        return None

    made = HANDLER(handler)
    _HANDLERS.append(made)
    return made


def capsule(handler) -> object:
    """The PyCapsule holding `handler`'s address, which jax.ffi.register_ffi_target takes."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.cast(handler, ctypes.c_void_p).value, None, None)


def host_view(address: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A NumPy array over a host buffer XLA owns (the CPU platform's arguments and results)."""
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0 or not address:
        return np.empty(shape, dtype)
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)
