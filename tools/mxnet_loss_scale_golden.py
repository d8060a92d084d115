"""Writes tests/fixtures/mxnet/amp_loss_scaler.npz with MXNet 1.9.1's own AMP loss scaler
(``mxnet.contrib.amp.loss_scaler.LossScaler``, which ``amp.init_trainer`` attaches to a Trainer): the
scale each step's loss is multiplied by (``loss_scale`` when ``amp.scale_loss`` reads it), for
gradients that overflow at chosen steps. ``has_overflow`` first takes the scale the previous step
decided and then decides the next, so a new scale reaches the loss one step late; growth is capped
at 2**24, and there is no floor.

    OMP_NUM_THREADS=1 /work/venvs/mxnet/bin/python tools/mxnet_loss_scale_golden.py
"""
from __future__ import annotations

import os

import mxnet as mx
import numpy as np
from mxnet.contrib.amp.loss_scaler import LossScaler

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "mxnet", "amp_loss_scaler.npz")
BAD = {4, 5, 11, 15, 16, 17, 18}  # 1-based steps whose gradients hold an inf
# (name, start scale, scale_seq_len, steps)
RUNS = [("default_start", 2.0 ** 16, 3, 24), ("ceiling", 2.0 ** 22, 1, 6), ("no_floor", 1.0, 1000, 24)]


def run(start, seq_len, steps) -> list[float]:
    p = mx.gluon.Parameter("w", shape=(2,))
    p.initialize(ctx=mx.cpu())
    scaler = LossScaler()
    scaler._loss_scale = scaler._next_loss_scale = start
    scaler._scale_seq_len = seq_len
    used = []
    for t in range(1, steps + 1):
        used.append(scaler.loss_scale)  # what amp.scale_loss multiplies this step's loss by
        p.grad()[:] = mx.nd.array([np.inf if t in BAD else 1.0, 1.0])
        scaler.has_overflow([p])
    return used


def main() -> None:
    data = {"bad_steps": np.array(sorted(BAD))}
    for name, start, seq_len, steps in RUNS:
        data[f"{name}/config"] = np.array([start, seq_len, steps], np.float64)
        data[f"{name}/scales"] = np.array(run(start, seq_len, steps), np.float32)
    np.savez(OUT, **data)
    print({k: v.tolist() for k, v in data.items() if k.endswith("scales")})


if __name__ == "__main__":
    main()
