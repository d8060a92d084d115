"""Paddle 3.3.1 ASGD goldens (tests/goldens/paddle, CPU dygraph) against
gradxform.paddle.asgd, 20 steps each; rtol 1e-5, atol 1e-7 (the largest
deviation seen is ~4e-7 relative). Paddle's float16 ASGD has no CPU kernel
(FAILURES.json), so float16/multi_precision is checked in test_paddle.py
against a NumPy transcription only."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from trajectories import paddle_schedule
from gradxform import paddle as P

GOLD = os.path.join(os.path.dirname(__file__), "goldens", "paddle")
CASES = sorted(f[:-4] for f in os.listdir(GOLD) if f.endswith(".npz") and f.startswith("asgd_"))
CLIPS = {"ClipGradByGlobalNorm": P.clip_grad_by_global_norm, "ClipGradByNorm": P.clip_grad_by_norm,
         "ClipGradByValue": P.clip_grad_by_value}


_sched = paddle_schedule


def build(meta):
    kw = dict(meta["kwargs"])
    if meta["lr_schedule"]:
        kw["learning_rate"] = _sched(meta["lr_schedule"])
    wd = kw.get("weight_decay")
    if isinstance(wd, dict):
        kw["weight_decay"] = {"L2Decay": P.l2_decay, "L1Decay": P.l1_decay}[wd["type"]](wd["coeff"])
    if kw.get("grad_clip"):
        clip = dict(kw["grad_clip"])
        kw["grad_clip"] = CLIPS[clip.pop("type")](**clip)
    return P.asgd(**kw)


@pytest.mark.parametrize("case", CASES)
def test_asgd_golden_trajectory(case):
    z = np.load(os.path.join(GOLD, case + ".npz"))
    meta = json.loads(str(z["meta"]))
    names = meta["names"]
    tx = build(meta)
    params = {n: jnp.asarray(z[f"w0_{i}"]) for i, n in enumerate(names)}
    state = tx.init(params)
    step = jax.jit(tx.update)
    for t in range(meta["steps"]):
        grads = {n: jnp.asarray(z[f"g_{t}_{i}"]) for i, n in enumerate(names)}
        updates, state = step(grads, state, params)
        params = gx.apply_updates(params, updates)
        for i, n in enumerate(names):
            np.testing.assert_allclose(np.asarray(params[n]), z[f"w_{t}_{i}"], rtol=1e-5, atol=1e-7,
                                       err_msg=f"{case} step {t} {n}")
    # final accumulators: d (running sum) and y (the stored gradients, (batch_num, *shape))
    asgd_state = next(s for s in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, P._asgd.ASGDState))
                      if isinstance(s, P._asgd.ASGDState))
    for i, n in enumerate(names):
        if f"s_d_0_{i}" in z.files:
            np.testing.assert_allclose(np.asarray(asgd_state.d[n]), z[f"s_d_0_{i}"], rtol=1e-5, atol=1e-6)
        if f"s_y_0_{i}" in z.files:
            np.testing.assert_allclose(np.asarray(asgd_state.y[n]), z[f"s_y_0_{i}"], rtol=1e-5, atol=1e-6)
