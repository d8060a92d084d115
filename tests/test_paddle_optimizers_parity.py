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
from gradxform._state_paths import state_paths
from gradxform.migrate._paddle import ACCUMULATORS
import quick_compile

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
        # float32 runs are compared within rtol 1e-5: a quick compile; bfloat16 ones must round
        # to Paddle's very numbers, so they compile as users do
        _BUILT[case] = (tx, (quick_compile.jit if meta["dtype"] == "float32" else jax.jit)(tx.update))
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


def _momentum_kernel(z, meta, rescale_grad):
    """Paddle's dense momentum kernel, float32 NumPy (phi/kernels/impl/momentum_kernel_impl.h,
    ``DenseMomentumFunctor<..., NoNesterov>``: ``grad = g * rescale_grad; v = v * mu + grad;
    w -= lr * v``), no regularizer; the GPU functor applies ``rescale_grad``, the CPU one
    (``CPUDenseMomentumFunctor``) has no such argument, i.e. ``rescale_grad=1``."""
    k = meta["kwargs"]
    lr, mu, rs = np.float32(k["learning_rate"]), np.float32(k.get("momentum", 0.9)), np.float32(rescale_grad)
    n = len(meta["names"])
    w = [z[f"w0_{i}"].astype(np.float32) for i in range(n)]
    v = [np.zeros_like(x) for x in w]
    out = []
    for t in range(meta["steps"]):
        for i in range(n):
            v[i] = v[i] * mu + z[f"g_{t}_{i}"] * rs
            w[i] = w[i] - lr * v[i]
        out.append([x.copy() for x in w])
    return out


def test_momentum_applies_rescale_grad_as_paddle_gpu_does():
    """The transcription with rescale_grad=1 reproduces the CPU golden (so it is
    Paddle's kernel), and gradxform with rescale_grad=0.5 follows it with 0.5 (the
    GPU functor's rule), 20 steps at the trajectory's tolerance."""
    z, meta = _load("momentum_rescale_grad")
    assert meta["kwargs"]["rescale_grad"] == 0.5
    for t, ws in enumerate(_momentum_kernel(z, meta, 1.0)):
        for i, w in enumerate(ws):
            np.testing.assert_allclose(w, z[f"w_{t}_{i}"], rtol=1e-5, atol=1e-6, err_msg=f"cpu step {t}")
    _, _, applied, _ = run_golden("momentum_rescale_grad", P.momentum(**meta["kwargs"]))
    for t, ws in enumerate(_momentum_kernel(z, meta, 0.5)):
        for i, n in enumerate(meta["names"]):
            np.testing.assert_allclose(applied[t][n], ws[i], rtol=1e-5, atol=1e-6, err_msg=f"gpu step {t} {n}")
    assert np.max(np.abs(applied[-1]["dense.bias"] - z["w_19_1"])) > 1e-2  # 0.5 is not 1 here


@pytest.mark.parametrize("case", [c for c in CASES if any(k.startswith("s_") for k in np.load(
    os.path.join(GOLD, f"opt_{c}.npz")).files)])
def test_final_accumulators_match_paddles(case):
    """Every accumulator Paddle saved after the 20 steps (``s_*``, under its Paddle
    name in ``meta['state_names']``) against gradxform's own after the same steps:
    the saved dict is read into a state of ``tx`` by `from_paddle_state_dict` (the
    name mapping), and each accumulator field is compared, leaf by leaf (rtol 1e-5,
    atol 1e-6 as the weights; the beta powers are float32 running products both sides)."""
    z, meta, traj, state = run_golden(case)
    if case == "sgd_bf16_multi_precision":
        # the CPU sgd kernel never reads nor writes the master weight (see OVERRIDE):
        # Paddle saved the float32 copy made at construction, untouched by 20 steps
        for i in range(len(meta["names"])):
            np.testing.assert_array_equal(z[f"s_master_{i}"], z[f"w0_{i}"])
        return
    dtype = jnp.bfloat16 if meta["dtype"] == "bfloat16" else jnp.float32
    names = meta["names"]
    params = {n: jnp.asarray(traj[-1][n]).astype(dtype) for n in names}
    sd = {}
    for key, pname in meta["state_names"].items():
        if pname.startswith("master_weights/"):
            sd.setdefault("master_weights", {})[pname.split("/", 1)[1]] = z[key]
        else:
            sd[pname] = z[key]
    tx, _ = built(case, meta)
    paddles = gx.migrate.from_paddle_state_dict(sd, params, tx)
    ours = dict(state_paths(state))
    compared = 0
    for path, node in state_paths(paddles):
        fields = dict(ACCUMULATORS.get(type(node), {}))
        if type(node).__name__ == "MasterWeightsState":
            fields["master"] = "master"
        for field in fields:
            if field not in node._fields:
                continue
            mine, theirs = getattr(ours[path], field), getattr(node, field)
            pairs = zip(jax.tree.leaves(mine), jax.tree.leaves(theirs))
            if field in getattr(type(node), "per_leaf_fields", ()):  # a vector, an entry per leaf
                assert np.shape(mine) == np.shape(theirs) == (len(names),), (case, field)
                pairs = zip(np.asarray(mine), np.asarray(theirs))
            for a, b in pairs:
                np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=1e-5,
                                           atol=1e-6, err_msg=f"{case} {type(node).__name__}.{field}")
                compared += 1
    assert compared >= len([k for k in z.files if k.startswith("s_")]), (compared, case)


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
