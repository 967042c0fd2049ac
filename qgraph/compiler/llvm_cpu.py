"""The CPU's LLVM JIT for emitted code (lang.llvm): one MCJIT engine per process, and the ctypes
entry through which a compiled function is called with NumPy arrays and numbers.

Optimised as numba optimises (LLVM's O3 pipeline with loop and SLP vectorisation, for the host's
CPU), so an emitted serial form runs as fast as numba's compile of the same source.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..lang.llvm import module as emitted
from ..lang.llvm.kinds import NotEmittable
from .code_cache import CodeCache, entry_key
from .emitter_mode import OFF, STRICT, emitter_mode

_PYTHON_SYMBOLS = ("PyErr_CheckSignals", "PyErr_Fetch", "PyErr_NormalizeException", "PyException_SetTraceback",
                   "Py_DecRef", "Py_IncRef", "PyEval_SaveThread", "PyEval_RestoreThread", "PyErr_SetString",
                   "PyErr_Occurred", "PyObject_IsInstance", "PyFloat_AsDouble", "PyObject_IsTrue",
                   "PyLong_AsLongLong", "PyLong_AsUnsignedLongLong", "PyLong_FromLongLong", "PyTuple_New",
                   "PyTuple_SetItem")
METH_FASTCALL = 0x80
_LOCK = threading.Lock()
_KEPT: dict = {}  # external symbol -> object of every emitted module loaded
_ENGINE: list = []


class _Engine:
    def __init__(self) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        llvm.initialize_native_asmparser()
        _check_array_layout()
        for name in _PYTHON_SYMBOLS:
            llvm.add_symbol(name, ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value)
        libm = ctypes.CDLL(None)
        for name in ("clock_gettime",):
            llvm.add_symbol(name, ctypes.cast(getattr(libm, name), ctypes.c_void_p).value)
        target = llvm.Target.from_default_triple()
        self.cpu, self.features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        self.machine = target.create_target_machine(cpu=self.cpu, features=self.features, opt=3, jit=True)
        self.llvm = llvm
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.machine)

    def key_parts(self) -> tuple:
        """What emitted object code depends on besides its source: LLVM and the CPU it was made for."""
        return (repr(self.llvm.llvm_version_info), self.machine.triple, self.cpu, self.features)

    def optimised(self, code: emitted.EntryCode):
        """The entry's module optimised as numba optimises (O3, loop and SLP vectorisation)."""
        llvm = self.llvm
        module = llvm.parse_assembly(code.ir)
        module.triple = self.machine.triple
        module.data_layout = str(self.machine.target_data)
        module.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        builder = llvm.create_pass_builder(self.machine, tuning)
        builder.getModulePassManager().run(module, builder)
        return module

    def object_code(self, code: emitted.EntryCode) -> bytes:
        return self.machine.emit_object(self.optimised(code))

    def link(self, objects: bytes, name: str, symbols: dict) -> int:
        """Load object code whose external symbols name the Python objects `symbols`; its entry's address."""
        for symbol, obj in symbols.items():
            _KEPT[symbol] = obj  # (None, ndarray, exception classes: alive while the process is)
            self.llvm.add_symbol(symbol, id(obj))
        self.engine.add_object_file(self.llvm.ObjectFileRef.from_data(objects))
        self.engine.finalize_object()
        return self.engine.get_function_address(name)


def _check_array_layout() -> None:
    """The entry reads an array's data, dimensions and strides at fixed offsets of its object: check
    them against a live array (a NumPy or Python build that moved them would be read wrong)."""
    probe = np.zeros((3, 5))
    base = id(probe)

    def word(offset: int) -> int:
        return ctypes.c_void_p.from_address(base + offset).value or 0

    dims, strides = word(emitted.DIMENSIONS), word(emitted.STRIDES)
    if word(emitted.DATA) != probe.ctypes.data or ctypes.c_int64.from_address(dims + 8).value != 5 or \
            ctypes.c_int64.from_address(strides).value != 40:
        raise NotEmittable("this NumPy's array objects are laid out differently")


def engine() -> _Engine:
    with _LOCK:
        if not _ENGINE:
            _ENGINE.append(_Engine())
        return _ENGINE[0]


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("function", ctypes.c_void_p), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


_NEW_FUNCTION = ctypes.pythonapi.PyCFunction_NewEx
_NEW_FUNCTION.restype, _NEW_FUNCTION.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_DEFINITIONS: list = []  # the method definitions of every emitted function: they must outlive it


def builtin_function(name: str, address: int):
    """The compiled fast-call entry at `address` as a Python builtin function (called as cheaply as one)."""
    definition = _MethodDef(name.encode(), address, METH_FASTCALL, None)
    _DEFINITIONS.append(definition)
    return _NEW_FUNCTION(ctypes.addressof(definition), None, None)


def _import_path(obj) -> str:
    return "builtins:None" if obj is None else f"{obj.__module__}:{obj.__qualname__}"


def _imported(path: str):
    import importlib

    module, name = path.split(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def compile_entry(fdef, namespace: dict, values: tuple, helpers: dict, cache: CodeCache | None,
                  source_key: str | None = None):
    """(builtin function, code (None when loaded), loaded from `cache`) of `fdef` for `values`' types;
    NotEmittable where the emitter does not cover it. A cache entry is found by `source_key` (what the
    generated code depends on, compiler.cpu_program's fingerprint) and the argument types, so a warm
    process loads the object code without emitting anything."""
    from ..lang.llvm.kinds import of_value
    from ..lang.llvm.module import entry_code

    types = [of_value(v) for v in values]
    jit = engine()
    key = None if cache is None or source_key is None else \
        entry_key("llvm-cpu", source_key, fdef.name, repr(types), *jit.key_parts())
    found = None if key is None else cache.load(key)
    if found is not None:
        manifest, objects = found
        try:
            symbols = {name: _imported(path) for name, path in manifest["symbols"].items()}
        except (ImportError, AttributeError, KeyError, ValueError):
            found = None  # an object it names is gone: compile afresh
        else:
            with _LOCK:
                address = jit.link(objects, manifest["name"], symbols)
            return builtin_function(fdef.name, address), None, True
    code = entry_code(fdef, namespace, types, helpers)
    objects = jit.object_code(code)
    if key is not None:
        cache.store(key, {"name": code.name, "function": code.function,
                          "symbols": {name: _import_path(obj) for name, obj in code.symbols.items()}}, objects)
    with _LOCK:
        address = jit.link(objects, code.name, code.symbols)
    return builtin_function(fdef.name, address), code, False


def emitter_names(injected: dict) -> dict:
    """The emitter's bindings of the names compiler.cpu_program injects into generated code: its
    own primitives where it has them, `calls.Unavailable` for the numba objects it has none for."""
    from ..lang.llvm import calls, runtime
    from ..lang.llvm.kinds import FLOAT32, INT64, UINT64
    from ..lang.llvm.parallel import PRANGE
    from ..lang.lower.debug_checks import SIGNAL_ERROR
    from ..lang.lower.lowering import PREFIX

    own = {"_qg_prange": PRANGE, "_qg_interrupted": runtime.interrupted_primitive(SIGNAL_ERROR),
           "_qg_threads": runtime.THREADS, "_qg_i64": calls.Cast(INT64), "_qg_f32": calls.Cast(FLOAT32),
           "_qg_u64": calls.Cast(UINT64), "_qg_clock_ns": runtime.CLOCK_NS, "_qg_trip_count": runtime.TRIP_COUNT,
           "_qg_report_fence": runtime.REPORT_FENCE}
    for op in ("add", "sub", "min", "max"):
        own[f"{PREFIX}atomic_{op}"] = runtime.atomic(op)
    names = {}
    for name, value in injected.items():
        if name in own:
            names[name] = own[name]
        elif type(value).__module__.split(".")[0] == "numba":  # a dispatcher, an intrinsic, a numba type
            names[name] = calls.Unavailable(name)
        else:
            names[name] = value  # min, max, math.floor, an exception class
    return names


class FormEmitter:
    """A kernel's serial or parallel form emitted per argument types (numba compiles what it does not
    cover: `skipped` says why). QGRAPH_EMITTER=0 leaves every form to numba; =strict raises an
    emitter's own failure instead of falling back (for qgraph's tests)."""

    def __init__(self, fdef, namespace: dict, injected: dict, funcs: dict, cache_dir: str | None,
                 fingerprint: str) -> None:
        from collections import ChainMap

        from .cpu_interrupts import runtime_sources

        names = emitter_names(injected)
        self.fdef, self.namespace = fdef, ChainMap(names, namespace)
        self.helpers = {**runtime_sources(), **{n: (d, ChainMap(names, ns)) for n, (d, ns) in funcs.items()}}
        self.functions: dict = {}  # argument types -> builtin function
        self.codes: dict = {}  # argument types -> lang.llvm.module.EntryCode (kernel.inspect)
        self.skipped: str | None = None
        self.cache = None if cache_dir is None else CodeCache(cache_dir, "cpu-llvm")
        self.fingerprint = fingerprint
        self.loaded = 0  # functions whose object code came from the disk cache

    def code_for(self, values: tuple):
        """The emitted code (lang.llvm.module.EntryCode) of the form compiled for `values`' types; None
        where its object code was loaded from the cache or it was not emitted."""
        from ..lang.llvm.kinds import of_value

        return self.codes.get(tuple(of_value(v) for v in values))

    def function_for(self, values: tuple):
        """The compiled form for `values`' types (a builtin function), or None."""
        mode = emitter_mode()
        if mode == OFF:
            self.skipped = "QGRAPH_EMITTER=0"
            return None
        from ..lang.llvm.kinds import of_value

        try:
            types = tuple(of_value(v) for v in values)
            if types not in self.functions:
                function, self.codes[types], loaded = compile_entry(self.fdef, self.namespace, values,
                                                                    self.helpers, self.cache, self.fingerprint)
                self.functions[types] = function
                self.loaded += loaded
            return self.functions[types]
        except NotEmittable as e:
            self.skipped = str(e)
            return None
        except Exception as e:  # the emitter's own failure: numba's compile is always right
            if mode == STRICT:
                raise
            self.skipped = f"the emitter failed: {type(e).__name__}: {e}"
            return None


def function_listing(code: emitted.EntryCode, name: str) -> tuple[str, str]:
    """(LLVM IR as emitted, optimised assembly) of the generated function `name` in `code` and of the
    parallel loops' chunk functions it calls (lang.llvm.parallel), for kernel.inspect. LLVM inlines a
    unit into the runner, so its assembly is its chunk functions' where it has them."""
    import re

    jit = engine()
    module = jit.llvm.parse_assembly(code.ir)
    own = code.function_names[name]
    text = str(module.get_function(own))
    chunks = sorted(set(re.findall(r'@"?(_qg_chunk_\d+)"?', text)), key=lambda c: int(c.rsplit("_", 1)[1]))
    ir_text = "\n".join([text] + [str(module.get_function(c)) for c in chunks])
    assembly = jit.machine.emit_assembly(jit.optimised(code))

    def section(function: str) -> str | None:
        found = re.search(rf"^{re.escape(function)}:.*?^\.Lfunc_end\d+:", assembly, re.S | re.M)
        return None if found is None else found.group(0)

    sections = [found for found in map(section, [own] + chunks) if found is not None]
    if not sections:  # inlined into the runner: its code is the entry's
        sections = [f"# {name} is inlined into the runner {code.name}", section(code.name) or ""]
    return f"; {name}: emitted by qgraph (lang.llvm)\n{ir_text}", "\n".join(sections)
