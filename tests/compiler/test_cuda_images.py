"""compiler/cuda_images: a specialisation's PTX groups linked on threads into cubins, packed into one
code-cache binary and unpacked again, and each entry found in the module that defines it."""

from __future__ import annotations

import threading
import time

import pytest

from qgraph.compiler.cuda_images import CudaImages, LoadedImages, link_groups, link_threads


def _ptx(*entries: str) -> str:
    return "\n".join(f".visible .entry {e}(\n.param .u64 {e}_param_0\n)\n{{\nret;\n}}" for e in entries)


GROUPS = [[("a.ptx", _ptx("k0", "k1"))], [("trigger_a.ptx", _ptx("k0_t", "k1_t"))],
          [("gating_a.ptx", _ptx("k1_g")), ("helper.ptx", "// a device function, no entry")]]


def test_each_group_is_linked_apart_on_threads_at_once_and_knows_its_entries():
    lock, running, most = threading.Lock(), [0], [0]

    def link(group):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return ("|".join(name for name, _ in group)).encode()

    images = link_groups(link, GROUPS)
    assert most[0] == min(3, link_threads())  # as many at once as there are cores for them
    assert images.cubins == (b"a.ptx", b"trigger_a.ptx", b"gating_a.ptx|helper.ptx")
    assert images.entries == (("k0", "k1"), ("k0_t", "k1_t"), ("k1_g",))


def test_one_group_links_on_the_calling_thread_and_no_group_links_nothing():
    caller = threading.get_ident()
    seen = []
    images = link_groups(lambda g: seen.append(threading.get_ident()) or b"x", GROUPS[:1])
    assert seen == [caller] and images.cubins == (b"x",)
    assert link_groups(lambda g: pytest.fail("nothing to link"), [[]]).cubins == ()


def test_a_failing_link_raises_its_own_error():
    def link(group):
        if group[0][0].startswith("trigger"):
            raise RuntimeError("ptxas: trigger_a.ptx, line 3; error")
        return b"x"

    with pytest.raises(RuntimeError, match="trigger_a.ptx, line 3"):
        link_groups(link, GROUPS)


def test_the_images_pack_into_one_binary_and_unpack_again():
    images = link_groups(lambda g: g[0][0].encode() * 3, GROUPS)
    again = CudaImages.unpacked(images.manifest(), images.binary())
    assert again == images and images.nbytes == len(images.binary())


def test_an_entry_of_the_older_format_is_one_image_and_a_damaged_one_is_a_miss():
    older = CudaImages.unpacked({"entries": ["k0"]}, b"cubin")
    assert older.cubins == (b"cubin",) and older.entries is None
    images = link_groups(lambda g: b"xy", GROUPS)
    manifest = images.manifest()
    assert CudaImages.unpacked(manifest, images.binary()[:-1]) is None  # sizes no longer add up
    assert CudaImages.unpacked(dict(manifest, image_entries=[["k0"]]), images.binary()) is None


class _Device:
    def __init__(self):
        self.loaded, self.unloaded = [], []

    def load_module(self, cubin):
        self.loaded.append(cubin)
        return f"module:{cubin.decode()}"

    def unload_module(self, module):
        self.unloaded.append(module)

    def function(self, module, entry):
        return f"{module}/{entry}"


def test_loaded_images_find_each_entry_in_the_module_defining_it():
    device = _Device()
    loaded = LoadedImages(device, link_groups(lambda g: g[0][0].encode(), GROUPS))
    assert loaded.function("k1") == "module:a.ptx/k1"
    assert loaded.function("k0_t") == "module:trigger_a.ptx/k0_t"
    assert loaded.function("k1_g") == "module:gating_a.ptx/k1_g"
    loaded.unload()
    assert device.unloaded == ["module:a.ptx", "module:trigger_a.ptx", "module:gating_a.ptx"]
    older = LoadedImages(device, CudaImages((b"all",), None))
    assert older.function("k1_g") == "module:all/k1_g"
