"""Which CUDA device a call's arguments live on, for launchers that run on one device each.

A launcher's generated resolution takes its fast paths only for arrays on its own device;
anything else reaches the checks here, which raise `OtherDevice` when the argument lives on
another device. The kernel then routes the call (`call_devices` finds the one device of all
its arrays, or names the arguments that disagree).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..driver.device import OPENED
from ..lang.types.vector_types import is_vector_value
from .interop import device_reader
from .resolve import cuda_slow, is_qgraph_array, struct_resolver
from .structs import RESOLVED_ATTR, STRUCT_EPOCH, is_struct_class


class OtherDevice(Exception):
    """An argument lives on another CUDA device than the launcher's (caught by the kernel's call,
    which routes the call there)."""


def argument_devices(value: object, name: str) -> list[tuple[int, str]]:
    """(device ordinal, argument or field name) of every device array in `value`."""
    if is_qgraph_array(value):
        device = value.cuda_device
        return [] if device is None else [(device.info.ordinal, name)]
    if is_vector_value(value):  # passed by value: on no device
        return []
    if is_struct_class(type(value)):
        found = []
        for field in dataclasses.fields(value):
            found += argument_devices(getattr(value, field.name), f"{name}.{field.name}")
        return found
    if type(value) in (int, float, bool) or not hasattr(value, "__cuda_array_interface__") and \
            not hasattr(value, "__dlpack__"):
        return []
    reader = device_reader(type(value))
    if reader is None:
        return []
    view = reader(value, name)
    return [] if view.device is None else [(view.device, name)]


def one_device(found: list[tuple[int, str]], what: str) -> int | None:
    """The single device of `found`, None when empty; ValueError naming the arguments otherwise."""
    devices = {ordinal for ordinal, _ in found}
    if len(devices) <= 1:
        return devices.pop() if devices else None
    where = ", ".join(f"'{name}' on cuda:{ordinal}" for ordinal, name in found)
    raise ValueError(f"{what}: its arrays are on different devices ({where}); a call runs on one device: copy "
                     "them to one (inside `with qgraph.device(i):`, qgraph.from_numpy(a.to_numpy()) makes "
                     "a copy on device i)")


def call_devices(names: tuple[str, ...], args: tuple, skip: int | None, what: str) -> int | None:
    """The device every array among `args` lives on (argument `skip`, the implicit random-number
    state, follows the call); ValueError naming them when they disagree."""
    found = []
    for k, (name, value) in enumerate(zip(names, args)):
        if k != skip:
            found += argument_devices(value, name)
    return one_device(found, what)


def device_checks(device) -> dict:
    """The namespace entries of a launcher's resolution on CudaDevice `device` (args.resolve):
    `_dev`, and slow paths that raise OtherDevice for an argument living elsewhere."""
    ordinal = device.info.ordinal
    attr = RESOLVED_ATTR["cuda"]

    def slow(value: object, name: str, fixed: str | None) -> tuple[str, bytes]:
        if fixed is None and is_qgraph_array(value) and value.cuda_device not in (None, device):
            raise OtherDevice(name)
        if is_struct_class(type(value)):
            return struct_on_device(value)
        if fixed is None and not is_qgraph_array(value) and not isinstance(value, np.ndarray):
            reader = device_reader(type(value))
            if reader is not None:  # a foreign device array: PyTorch, CuPy, CAI, DLPack
                view = reader(value, name)
                if view.device is not None and view.device != ordinal:
                    raise OtherDevice(name)
                return view.sig, view.abi
        sig, abi, _owner = cuda_slow(value, name, fixed)
        return sig, abi

    def struct_on_device(value: object) -> tuple:
        resolved = struct_resolver(type(value), "cuda")(value)
        # with one device open its arrays are there (a field reassigned each call pays no scan)
        if len(OPENED) > 1 and any(found != ordinal for found, _ in argument_devices(value, type(value).__name__)):
            raise OtherDevice(type(value).__name__)  # the kernel's route names the fields and their devices
        cached = getattr(value, attr, None)
        if cached is not None and cached[0] == STRUCT_EPOCH[0]:  # checked: the cache now says for which device
            value.__dict__[attr] = (cached[0], cached[1], device)
        return resolved

    return {"_dev": device, "_slow": slow, "_struct_on": struct_on_device}
