"""Per-call cost of kernel calls when more than one CUDA device is in use (issue 18).

Side by side in one process, on a 1-task graph kernel: calls on the default device before a
second device is opened, then, in interleaved rounds, the same calls with two devices open,
calls whose arrays live on device 1 made from the main thread (the kernel is bound to device
0, so each call hops to device 1's launcher), and the same from a thread scoped to device 1.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

import qgraph


@qgraph.kernel(cuda_graph=True)
def bump(y, a: float):
    for i in range(y.shape[0]):
        y[i] += a


def per_call_us(y, calls: int) -> float:
    qgraph.sync()
    start = time.perf_counter()
    for _ in range(calls):
        bump(y, 1.0)
    qgraph.sync()
    return (time.perf_counter() - start) / calls * 1e6


def in_thread(fn, *args) -> float:
    """fn(*args) run in a new thread whose current device is 1."""
    out = []

    def run() -> None:
        with qgraph.device(1):
            out.append(fn(*args))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    qgraph.init("cuda")
    y0 = qgraph.ndarray(np.float32, 256)
    alone = [per_call_us(y0, args.calls) for _ in range(args.rounds)]
    print(f"{'default device, one device open':44s} {np.median(alone):6.2f} us/call  (min {min(alone):.2f})")
    if qgraph.device_count() < 2:
        print("one device: the other rows need two")
        return
    with qgraph.device(1):
        y1 = qgraph.ndarray(np.float32, 256)
    rows = {"default device, two devices open": lambda: per_call_us(y0, args.calls),
            "device 1 from the main thread (routed)": lambda: per_call_us(y1, args.calls),
            "device 1 from a thread scoped to it": lambda: in_thread(per_call_us, y1, args.calls)}
    times: dict = {name: [] for name in rows}
    for _ in range(args.rounds):  # interleaved: a busy spell hits every row alike
        for name, measure in rows.items():
            times[name].append(measure())
    base = np.median(times["default device, two devices open"])
    for name, values in times.items():
        print(f"{name:44s} {np.median(values):6.2f} us/call  (min {min(values):.2f}, "
              f"{np.median(values) / base:.2f}x the default device)")


if __name__ == "__main__":
    main()
