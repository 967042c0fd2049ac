"""A memory-bound task against the device's copy bandwidth, measured in the same run.

    python benchmarks/bandwidth.py [--log2n 26]

saxpy `y[i] = a * x[i] + y[i]` on 2^26 float32 moves 12 bytes per element (read x, read
and write y); a device-to-device copy of N bytes moves 2N. Both are timed as the median of
many back-to-back calls, synchronised at the end.
"""

from __future__ import annotations

import argparse

import numpy as np

import qgraph
from qgraph.tools.timing import median_call_seconds


@qgraph.kernel(cuda_graph=True)
def saxpy(x, y, a: qgraph.f32):
    for i in range(x.shape[0]):
        y[i] = a * x[i] + y[i]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=26)
    args = parser.parse_args()
    qgraph.init("cuda")
    from qgraph.driver.device import check, driver

    n = 1 << args.log2n
    x = qgraph.from_numpy(np.random.default_rng(0).random(n, dtype=np.float32))
    y = qgraph.from_numpy(np.random.default_rng(1).random(n, dtype=np.float32))
    src = qgraph.ndarray(qgraph.f32, (3 * n,))
    dst = qgraph.ndarray(qgraph.f32, (3 * n,))
    d = driver()
    stream = qgraph.runtime.STATE.cuda.stream_handle

    def copy() -> None:
        check(d.cuMemcpyDtoDAsync(dst._ptr, src._ptr, src.nbytes, stream), "cuMemcpyDtoDAsync")

    copy_s = median_call_seconds(copy, calls=20, repeat=7, sync=qgraph.sync)
    saxpy_s = median_call_seconds(lambda: saxpy(x, y, 1.0001), calls=20, repeat=7, sync=qgraph.sync)
    copy_bw = 2 * src.nbytes / copy_s / 1e9
    saxpy_bw = 12 * n / saxpy_s / 1e9
    print(f"device-to-device copy: {copy_bw:8.1f} GB/s (reads + writes)")
    print(f"saxpy, 2^{args.log2n} float32: {saxpy_bw:8.1f} GB/s = {100 * saxpy_bw / copy_bw:.1f}% of the copy")


if __name__ == "__main__":
    main()
