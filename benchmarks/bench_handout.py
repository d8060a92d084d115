"""What ``Trainer.params`` / ``Trainer.state`` cost now that they hand out copies
(so later, donating steps leave them valid), against handing out the stored
arrays as before, and against one training step. One CPU device, medians.

``python benchmarks/bench_handout.py [--calls 30]``
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import gradxform  # noqa: E402
from gradxform._fused import FlatTree, unflatten_state  # noqa: E402
from bench_train_step import batch_of, mlp_loss, mlp_params  # noqa: E402

# name: (layers, width, batch)
MODELS = {"4 x 512 (8 leaves, 1.05 M, 4.2 MB)": (4, 512, 32),
          "200 x 64 (400 leaves, 0.83 M, 3.3 MB)": (200, 64, 32)}


def median_ms(fn, calls: int) -> float:
    fn()
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def uncopied(trainer, what):
    """What the Trainer handed out before: views of, or the very, stored arrays."""
    if what == "params":
        p = trainer._place.one(trainer._params)
        return p.unravel() if isinstance(p, FlatTree) else p
    return unflatten_state(trainer._leaf_tx, trainer._place.one(trainer._state))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    args = ap.parse_args(argv)
    print("| model | layout | step | params: stored / copy | state: stored / copy |")
    print("|---|---|---|---|---|")
    for name, (layers, width, bs) in MODELS.items():
        batch = batch_of(width, bs)
        for fused in (True, False):
            t = gradxform.Trainer(mlp_params(layers, width), "adam", {"learning_rate": 1e-3, "wd": 1e-4},
                                  devices=jax.devices()[:1], fused=fused)
            run = t.compile_step(mlp_loss)
            step = median_ms(lambda: run(batch, bs), args.calls)
            cells = []
            for what in ("params", "state"):
                old = median_ms(lambda: uncopied(t, what), args.calls)
                new = median_ms(lambda: getattr(t, what), args.calls)
                cells.append(f"{old:.2f} / {new:.2f} ms")
            print(f"| {name} | {'fused' if fused else 'per leaf'} | {step:.2f} ms | {cells[0]} | {cells[1]} |",
                  flush=True)


if __name__ == "__main__":
    main()
