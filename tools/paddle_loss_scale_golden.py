"""Writes tests/fixtures/paddle/loss_scaling.npz with Paddle's own AMP kernels (CPU), the ones
``paddle.amp.GradScaler`` runs: ``check_finite_and_unscale`` (the gradients times the float32
reciprocal of the scale, and the overflow flag) and ``update_loss_scaling`` (the scale after
each step: back off on the ``decr_every_n_nan_or_inf``-th overflow in a row, never below 1; grow
after ``incr_every_n_steps`` clean steps, where the result is finite).

    OMP_NUM_THREADS=1 /work/venvs/paddle/bin/python tools/paddle_loss_scale_golden.py
"""
from __future__ import annotations

import json
import os

import numpy as np
import paddle
from paddle import _C_ops

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "paddle", "loss_scaling.npz")
# steps whose gradients hold an inf (1-based); the runs: (name, init scale, incr_every_n, decr_every_n, steps)
BAD = {2, 4, 5, 9, 10, 11, 12, 16}
RUNS = [("every_overflow", 1024.0, 3, 1, 20), ("second_overflow", 1024.0, 3, 2, 20),
        ("third_overflow", 1024.0, 3, 3, 20), ("floor_of_one", 4.0, 5, 1, 20)]


def scales(init, incr, decr, steps) -> list[float]:
    s = paddle.to_tensor(np.array([init], np.float32))
    good = paddle.to_tensor(np.array([0], np.int32))
    bad = paddle.to_tensor(np.array([0], np.int32))
    out = []
    for t in range(1, steps + 1):
        x = [paddle.to_tensor(np.ones(2, np.float32))]
        found = paddle.to_tensor(np.array([t in BAD]))
        _C_ops.update_loss_scaling_(x, found, s, good, bad, incr, decr, 2.0, 0.5, False)
        out.append(float(s.numpy()[0]))
    return out


def unscaled(grad: np.ndarray, scale: float) -> np.ndarray:
    x = [paddle.to_tensor(grad)]
    s = paddle.to_tensor(np.array([scale], np.float32))  # the kernel takes the scale, multiplies by its reciprocal
    out, _ = _C_ops.check_finite_and_unscale_(x, s)
    return out[0].numpy()


def main() -> None:
    rng = np.random.default_rng(0)
    grad = (rng.standard_normal(512) * 1000).astype(np.float32)
    data = {"bad_steps": np.array(sorted(BAD)), "grad": grad, "meta": json.dumps(
        {"paddle": paddle.__version__, "runs": [r[0] for r in RUNS], "incr_ratio": 2.0, "decr_ratio": 0.5})}
    for name, init, incr, decr, steps in RUNS:
        data[f"{name}/config"] = np.array([init, incr, decr, steps], np.float64)
        data[f"{name}/scales"] = np.array(scales(init, incr, decr, steps), np.float32)
    for scale in (1000.0, 3.0, 65536.0):
        data[f"unscaled/{scale:g}"] = unscaled(grad, scale)
    np.savez(OUT, **data)
    print({k: v.tolist() for k, v in data.items() if k.endswith("scales")})


if __name__ == "__main__":
    main()
