"""The Paddle optimizer family against goldens from paddlepaddle 3.3.1 on CPU
(tools/paddle_optimizer_goldens.py -> tests/goldens/paddle/opt_*.npz): 20 steps
each, defaults and options, groups, regularizers, clips (need_clip too),
schedules, bfloat16 with and without multi_precision; per-step parameters at
rtol 1e-5 / atol 1e-6 (bfloat16 parameters: equal after rounding, see TOL);
and the final accumulators Paddle saved, where gradxform keeps the same ones.
"""
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
CASES = sorted(f[4:-4] for f in os.listdir(GOLD) if f.startswith("opt_") and f.endswith(".npz"))
FUN = {"SGD": P.sgd, "Momentum": P.momentum, "Adam": P.adam, "AdamW": P.adamw, "Adamax": P.adamax,
       "Adagrad": P.adagrad, "Adadelta": P.adadelta, "RMSProp": P.rmsprop, "Lamb": P.lamb, "NAdam": P.nadam,
       "RAdam": P.radam, "Rprop": P.rprop}
# where the rtol 1e-5 / atol 1e-6 default is widened, and why
TOL = {}
# Paddle 3.3.1's CPU momentum kernel ignores rescale_grad (its GPU kernel and its
# documentation apply it; gradxform applies it): the CPU golden is gradxform's
# run with rescale_grad=1, and with 0.5 gradxform takes a different (halved) step.
# Likewise Paddle 3.3.1's CPU sgd kernel ignores the master weight (``master_param
# UNUSED``: bfloat16 parameters are updated in bfloat16, lr rounded to bfloat16),
# so its multi_precision=True run is gradxform's multi_precision=False one;
# gradxform keeps float32 master weights as Paddle's GPU kernel does (checked
# against a NumPy transcription in test_paddle_optimizers.py).
OVERRIDE = {"momentum_rescale_grad": dict(rescale_grad=1.0), "sgd_bf16_multi_precision": dict(multi_precision=False)}


_sched = paddle_schedule


def _reg(wd):
    return getattr(P, wd["type"])(wd["coeff"]) if isinstance(wd, dict) else wd


def _clip(c, no_clip=()):
    c = dict(c)
    kind = c.pop("type")
    return getattr(P, kind)(**c, need_clip={n: False for n in no_clip} or None)


def build(meta):
    kw = dict(meta.get("kwargs", {}))
    if meta.get("lr_schedule"):
        kw["learning_rate"] = _sched(meta["lr_schedule"])
    if "weight_decay" in meta:
        kw["weight_decay"] = _reg(meta["weight_decay"])
    if meta.get("grad_clip"):
        kw["grad_clip"] = _clip(meta["grad_clip"], meta.get("no_clip", ()))
    if "decay_names" in meta:
        kw["apply_decay_param_fun"] = lambda n, s=set(meta["decay_names"]): n in s
    if "exclude_names" in meta:
        kw["exclude_from_weight_decay_fn"] = lambda p, s=set(meta["exclude_names"]): p.name in s
    if meta.get("groups"):
        kw["parameters"] = [{k: (_reg(v) if k == "weight_decay" else v) for k, v in g.items()}
                            for g in meta["groups"]]
    kw.update(OVERRIDE.get(meta["case"], {}))
    return FUN[meta["optimizer"]](**kw)


def _load(case):
    z = np.load(os.path.join(GOLD, f"opt_{case}.npz"))
    return z, json.loads(str(z["meta"]))


_BUILT = {}


def built(case, meta):
    """The case's optimizer and its jitted step, built once (the trajectory and
    the migration test share one compilation)."""
    if case not in _BUILT:
        tx = build(meta)
        _BUILT[case] = (tx, jax.jit(tx.update))
    return _BUILT[case]


def run_golden(case, tx=None):
    z, meta = _load(case)
    names = meta["names"]
    dtype = jnp.bfloat16 if meta["dtype"] == "bfloat16" else jnp.float32
    tx, step = built(case, meta) if tx is None else (tx, jax.jit(tx.update))
    params = {n: jnp.asarray(z[f"w0_{i}"]).astype(dtype) for i, n in enumerate(names)}
    state = tx.init(params)
    traj = []
    for t in range(meta["steps"]):
        grads = {n: jnp.asarray(z[f"g_{t}_{i}"]).astype(dtype) for i, n in enumerate(names)}
        updates, state = step(grads, state, params)
        params = gx.apply_updates(params, updates)
        traj.append({n: np.asarray(params[n].astype(jnp.float32)) for n in names})
    return z, meta, traj, state


@pytest.mark.parametrize("case", CASES)
def test_golden_trajectory(case):
    z, meta, traj, _ = run_golden(case)
    tol = TOL.get(case, dict(rtol=1e-5, atol=1e-6))
    for t, params in enumerate(traj):
        for i, n in enumerate(meta["names"]):
            np.testing.assert_allclose(params[n], z[f"w_{t}_{i}"], **tol, err_msg=f"{case} step {t} {n}")


def test_every_paddle_optimizer_has_goldens():
    seen = {_load(c)[1]["optimizer"] for c in CASES}
    assert set(FUN) <= seen


def test_momentum_applies_rescale_grad_as_paddle_gpu_does():
    z, meta = _load("momentum_rescale_grad")
    _, _, cpu_like, _ = run_golden("momentum_rescale_grad")
    _, _, applied, _ = run_golden("momentum_rescale_grad", P.momentum(**meta["kwargs"]))
    w0 = z["w0_1"]
    # the first step moves by lr * rescale_grad * g
    np.testing.assert_allclose(applied[0]["dense.bias"] - w0, 0.5 * (cpu_like[0]["dense.bias"] - w0), rtol=0, atol=1e-6)


FIX = os.path.join(os.path.dirname(__file__), "fixtures", "paddle")


@pytest.mark.parametrize("case", CASES)
def test_migrated_pdopt_continues_k_to_n(case):
    """``opt.state_dict()`` that Paddle saved after K=10 steps, read by
    `from_paddle_state_dict`, continues steps 10..19 of the golden trajectory
    (same tolerance as the trajectory)."""
    z, meta = _load(case)
    names, k = meta["names"], 10
    dtype = jnp.bfloat16 if meta["dtype"] == "bfloat16" else jnp.float32
    tx, step = built(case, meta)
    params = {n: jnp.asarray(z[f"w_{k - 1}_{i}"]).astype(dtype) for i, n in enumerate(names)}
    path = os.path.join(FIX, f"opt_{case}.pdopt")
    if case == "sgd_bf16_multi_precision":
        # paddle.save writes the bfloat16 master weights through a builtins.tuple
        # global, which the restricted unpickler refuses (its allow-lists stay as
        # they are): the reader says so instead of guessing; not continued here
        with pytest.raises(gx.migrate.UnsafePickleError, match="builtins.tuple"):
            gx.migrate.from_paddle_state_dict(path, params, tx)
        return
    state = gx.migrate.from_paddle_state_dict(path, params, tx)
    tol = TOL.get(case, dict(rtol=1e-5, atol=1e-6))
    for t in range(k, meta["steps"]):
        grads = {n: jnp.asarray(z[f"g_{t}_{i}"]).astype(dtype) for i, n in enumerate(names)}
        updates, state = step(grads, state, params)
        params = gx.apply_updates(params, updates)
        for i, n in enumerate(names):
            np.testing.assert_allclose(np.asarray(params[n].astype(jnp.float32)), z[f"w_{t}_{i}"], **tol,
                                       err_msg=f"{case} step {t} {n}")
