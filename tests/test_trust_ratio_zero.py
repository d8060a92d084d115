"""Trust-ratio rules where a norm is 0 (issue 28): a zero-initialised parameter
(|w| = 0, |r| > 0) and one that also gets zero gradients (|w| = |r| = 0).

* Paddle Lamb: recorded from paddlepaddle 3.3.1 on CPU
  (tools/paddle_optimizer_goldens.py cases ``lamb_zero_init*``; the whole
  trajectory is also checked in test_paddle_optimizers_parity.py). Here the
  first step of the zero-initialised bias is read from the golden: Paddle's
  ``lamb`` kernel takes ratio 1 there, so the bias moves by ``lr * r``, about
  ``lr`` per element, not 0 (a ratio of ``|w| / |r|`` = 0).
* MindSpore Lamb: MindSpore 2.10's CPU build has no Lamb kernel
  (``Unsupported op [Lamb] on CPU``) and its Python code is only the kernel
  call, so no golden can be recorded; the expected numbers come from a
  float64 transcription of the kernels' rule as tools/MINDSPORE_NOTES.md 4.5
  writes it out (Ascend ``LambApplyWeightAssign`` / newest GPU
  ``lamb_gpu_kernel.h``: ``w_norm > 0 ? (g_norm > 0 ? w_norm / g_norm : 1) : 1``;
  2022-23 GPU kernel for trust_ratio="clipped"), never from gradxform.
* MindSpore LARS (no guard: ratio 0 for |w| = 0) is covered in
  test_mindspore.py ``test_lars_zero_norm_weight_gets_ratio_zero``; the
  Ascend TBE ``lars_v2_update`` is its only kernel (no golden either).
* MXNet LBSGD's 'lars' ratio ``clip(sqrt(|w|^2 / (|g|^2 + wd |w|^2 + 1e-18)), 0.01,
  100)``: goldens ``lbsgd_lars_zero_init`` (|w| = 0: the 0.01 bound) and
  ``lbsgd_lars_zero_grad`` (g = 0, wd 1e-6: the 100 bound), recorded from MXNet
  1.9.1 and run by test_mxnet_parity.py (random parameters reach neither bound).

Tolerances: rtol 1e-5 / atol 1e-6 (float32 against float64, 10 steps).
"""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from gradxform import mindspore as M
from gradxform import paddle as P
from trajectories import run_jitted

GOLD = os.path.join(os.path.dirname(__file__), "goldens", "paddle")


def _load(case):
    z = np.load(os.path.join(GOLD, f"opt_{case}.npz"))
    return z, json.loads(str(z["meta"]))


@pytest.mark.parametrize("case", ["lamb_zero_init", "lamb_zero_init_always_adapt"])
def test_paddle_lamb_moves_a_zero_initialised_parameter(case):
    z, meta = _load(case)
    names = meta["names"]
    b = names.index("dense.bias")
    assert np.all(z[f"w0_{b}"] == 0)
    # Paddle: step 1 of Adam-like r = m^/(sqrt(v^)+eps) is sign(g) * 1/(1+eps/|g|): |step| ~ lr
    lr = meta["kwargs"]["learning_rate"]
    np.testing.assert_allclose(np.abs(z[f"w_0_{b}"]), lr, rtol=1e-3)
    params = {n: jnp.asarray(z[f"w0_{i}"]) for i, n in enumerate(names)}
    grads = [{n: z[f"g_{t}_{i}"] for i, n in enumerate(names)} for t in range(meta["steps"])]
    got, _ = run_jitted(P.lamb(**meta["kwargs"]), {k: np.asarray(v) for k, v in params.items()}, grads)
    for i, n in enumerate(names):
        np.testing.assert_allclose(got[n], z[f"w_{meta['steps'] - 1}_{i}"], rtol=1e-5, atol=1e-6, err_msg=n)
    if "bn.gamma" in meta.get("zero_grad", ()):  # |w| = |r| = 0: no NaN, no move
        g = names.index("bn.gamma")
        np.testing.assert_array_equal(z[f"w_{meta['steps'] - 1}_{g}"], 0.0)
        np.testing.assert_array_equal(got["bn.gamma"], 0.0)


def _ms_lamb_reference(w0, gs, lr, wd, clipped, b1=0.9, b2=0.999, eps=1e-6):
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, g in enumerate(gs, 1):
        for k in w:
            gk = g[k].astype(np.float64)
            m[k] = b1 * m[k] + (1 - b1) * gk
            v[k] = b2 * v[k] + (1 - b2) * gk * gk
            mh, vh = m[k] / (1 - b1 ** t), v[k] / (1 - b2 ** t)
            d = 0.0 if ("beta" in k or "gamma" in k) else wd
            r = mh / (np.sqrt(vh) + eps) + d * w[k]
            ratio_of = mh / np.sqrt(vh + eps) + d * w[k] if clipped else r
            w_norm, g_norm = np.linalg.norm(w[k]), np.linalg.norm(ratio_of)
            ratio = (w_norm / g_norm if g_norm > 0 else 1.0) if w_norm > 0 else 1.0
            if clipped:
                ratio = min(max(ratio, 0.0), 10.0)
            w[k] = w[k] - lr * ratio * r
    return w


@pytest.mark.parametrize("trust_ratio", ["update", "clipped"])
def test_mindspore_lamb_zero_norms_follow_the_kernel_rule(trust_ratio):
    rng = np.random.default_rng(3)
    w0 = {"dense/weight": rng.standard_normal((3, 4)).astype(np.float32),
          "dense/bias": np.zeros(4, np.float32),  # |w| = 0, |r| > 0: ratio 1
          "bn/gamma": np.zeros((2, 3), np.float32)}  # |w| = |r| = 0 (zero gradients): ratio 1, r = 0
    gs = [{"dense/weight": (0.5 * rng.standard_normal((3, 4))).astype(np.float32),
           "dense/bias": (0.5 * rng.standard_normal(4)).astype(np.float32),
           "bn/gamma": np.zeros((2, 3), np.float32)} for _ in range(10)]
    lr, wd = 0.1, 0.01
    got, _ = run_jitted(M.lamb(lr, weight_decay=wd, trust_ratio=trust_ratio), w0, gs)
    want = _ms_lamb_reference(w0, gs, lr, wd, trust_ratio == "clipped")
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # the bias moved about lr per step (ratio 1), not 0 (ratio |w| / |r| = 0)
    one, _ = run_jitted(M.lamb(lr, weight_decay=wd, trust_ratio=trust_ratio), w0, gs[:1])
    np.testing.assert_allclose(np.abs(one["dense/bias"]), lr, rtol=1e-3)
    np.testing.assert_array_equal(got["bn/gamma"], 0.0)
