"""Process-wide runtime: settings read from the environment, the arch and per-device state."""

from .settings import Settings, cache_directory
from .state import (
           STATE,
           CpuState,
           DeviceState,
           State,
           current_arch,
           device,
           device_count,
           device_info,
           ensure_init,
           init,
           reset,
           sync,
           sync_device,
)

__all__ = ["STATE", "CpuState", "DeviceState", "Settings", "State", "cache_directory", "current_arch", "device",
           "device_count", "device_info", "ensure_init", "init", "reset", "sync", "sync_device"]
