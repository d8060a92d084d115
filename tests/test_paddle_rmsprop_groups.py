"""Paddle RMSProp with a parameter group's own ``centered`` (issue 24): the
goldens Paddle 3.3.1 wrote (tools/paddle_optimizer_goldens.py
``rmsprop_group_centered`` / ``rmsprop_group_uncentered``; the family's
parity test checks gradxform against them at rtol 1e-5) against a float64
transcription of Paddle's ``rmsprop_`` kernel with ``_update_param_group``,
and gradxform against that transcription.

Tolerances: rtol 1e-5, atol 1e-6 against the float32 goldens (a few ulp per
step over 20 steps; atol for elements near 0); gradxform against the float64
transcription rtol 2e-5, atol 2e-6.
"""
from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx

GOLD = pathlib.Path(__file__).parent / "goldens" / "paddle"
CASES = ["rmsprop_group_centered", "rmsprop_group_uncentered"]


def load(case):
    z = np.load(GOLD / f"opt_{case}.npz")
    meta = json.loads(str(z["meta"]))
    names, steps = meta["names"], meta["steps"]
    w0 = [z[f"w0_{i}"] for i in range(len(names))]
    grads = [[z[f"g_{t}_{i}"] for i in range(len(names))] for t in range(steps)]
    want = [[z[f"w_{t}_{i}"] for i in range(len(names))] for t in range(steps)]
    lrs = [float(z[f"lr_{t}"]) for t in range(steps)]
    state = {k: z[k] for k in z.files if k.startswith("s_")}
    return meta, w0, grads, want, lrs, state


def transcription(meta, w0, grads, lrs):
    """Paddle ``RMSProp._append_optimize_op`` per group, ``rmsprop_`` (CPU, dense), float64."""
    spec = meta
    top = {**dict(rho=0.95, epsilon=1e-6, momentum=0.0, centered=False), **spec.get("kwargs", {})}
    top.pop("learning_rate", None)
    wd = spec.get("weight_decay")
    coeff = wd["coeff"] if isinstance(wd, dict) else 0.0
    per_name = {}
    for g in spec["groups"]:
        for n in g["params"]:
            per_name[n] = dict(top, **{k: v for k, v in g.items() if k != "params"})
    w = [x.astype(np.float64) for x in w0]
    mom = [np.zeros_like(x) for x in w]
    ms = [np.zeros_like(x) for x in w]
    mg = [np.zeros_like(x) for x in w]
    out = []
    for t, gs in enumerate(grads):
        for i, n in enumerate(meta["names"]):
            h = per_name[n]
            g = gs[i].astype(np.float64) + coeff * w[i]  # L2Decay
            ms[i] = h["rho"] * ms[i] + (1 - h["rho"]) * g * g
            if h["centered"]:
                mg[i] = h["rho"] * mg[i] + (1 - h["rho"]) * g
                den = np.sqrt(ms[i] - mg[i] ** 2 + h["epsilon"])
            else:
                den = np.sqrt(ms[i] + h["epsilon"])
            mom[i] = h["momentum"] * mom[i] + lrs[t] * g / den
            w[i] = w[i] - mom[i]
        out.append([x.copy() for x in w])
    return out, mg


def gradxform_run(meta, w0, grads):
    spec = meta
    kw = dict(spec.get("kwargs", {}))
    if spec.get("lr_schedule"):
        s = spec["lr_schedule"]
        kw["learning_rate"] = getattr(gx.schedules, "Paddle" + s["type"])(**s["kwargs"])
    if spec.get("weight_decay"):
        kw["weight_decay"] = gx.paddle.L2Decay(spec["weight_decay"]["coeff"])
    kw["parameters"] = [dict(g) for g in spec["groups"]]
    tx = gx.paddle.rmsprop(**kw)
    names = meta["names"]
    params = {n: jnp.asarray(x) for n, x in zip(names, w0)}
    state = tx.init(params)
    step = jax.jit(lambda p, s, g: (lambda u, s2: (gx.apply_updates(p, u), s2))(*tx.update(g, s, p)))
    out = []
    for gs in grads:
        params, state = step(params, state, {n: jnp.asarray(x) for n, x in zip(names, gs)})
        out.append([np.asarray(params[n], np.float64) for n in names])
    return out, state, tx


@pytest.mark.parametrize("case", CASES)
def test_transcription_matches_paddle(case):
    meta, w0, grads, want, lrs, state = load(case)
    got, mg = transcription(meta, w0, grads, lrs)
    for t, (a_t, b_t) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(a_t, b_t)):
            np.testing.assert_allclose(a, b.astype(np.float64), rtol=1e-5, atol=1e-6, err_msg=f"{case} step {t + 1} {i}")
    for i in range(len(w0)):  # Paddle keeps a mean_grad for every parameter, zero where not centered
        np.testing.assert_allclose(mg[i], state[f"s_mean_grad_0_{i}"].astype(np.float64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_gradxform_matches_the_transcription(case):
    meta, w0, grads, _, lrs, _ = load(case)
    got, state, _ = gradxform_run(meta, w0, grads)
    want, mg = transcription(meta, w0, grads, lrs)
    for t, (a_t, b_t) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(a_t, b_t)):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f"{case} step {t + 1} {i}")
    leaves = jax.tree.leaves(state)
    assert leaves and all(bool(jnp.isfinite(x).all()) for x in leaves)


def test_group_centered_is_a_per_group_hyperparameter():
    tx = gx.paddle.rmsprop(0.01, parameters=[{"params": ["a"], "centered": True}, {"params": ["b"]}])
    params = {"a": jnp.ones(3), "b": jnp.ones(2)}
    state = tx.init(params)
    assert gx.get_hyper(state, "centered") == 0.0
    assert gx.get_hyper(state, "centered", group=0) == 1.0 and gx.get_hyper(state, "centered", group=1) == 0.0
    # all groups agree: centered stays static, no hyperparameter
    plain = gx.paddle.rmsprop(0.01, centered=True, parameters=[{"params": ["a"], "centered": True}, {"params": ["b"]}])
    with pytest.raises(KeyError):
        gx.get_hyper(plain.init(params), "centered")
