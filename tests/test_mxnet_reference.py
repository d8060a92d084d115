"""MXNet family against the NumPy transcription in mxnet_reference.py.

The goldens pin gradxform to MXNet on fixed configurations; this crosses
each optimizer with the options a port uses (wd, rescale_grad,
clip_gradient, lr_mult/wd_mult by name and glob, begin_num_update, every
scheduler (the reference runs its own transcription of mxnet/lr_scheduler.py,
checked against MXNet's recorded rates), float16 master weights) over 12 steps. Tolerance: float32 rtol
2e-5, atol 2e-6 (operation order differs from the kernels' by a few ulp per
step); float16 with master weights rtol/atol 1e-3 (one float16 ulp).
"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
import mxnet_schedules_reference as mxs
from mxnet_reference import Reference

NAMES = ["enc/dense0_weight", "enc/dense0_bias", "head/bn_gamma"]
SHAPES = [(4, 3), (3,), (2, 2)]
OWN = {
    "sgd": dict(momentum=0.9), "ccsgd": dict(momentum=0.5), "nag": dict(momentum=0.9),
    "signum": dict(momentum=0.8, wd_lh=0.02), "ftml": dict(beta1=0.5), "adam": dict(beta1=0.8),
    "adagrad": dict(eps=1e-6), "rmsprop": dict(centered=True, gamma2=0.8, clip_weights=3.0),
    "adadelta": dict(rho=0.8), "ftrl": dict(lamda1=0.02, beta=0.5), "adamax": dict(beta2=0.99),
    "nadam": dict(schedule_decay=0.01), "dcasgd": dict(lamda=0.3),
    "lbsgd": dict(momentum=0.9, warmup_strategy="sqrt", warmup_epochs=2, updates_per_epoch=3, batch_scale=2),
}
LR = {"adadelta": None, "ftrl": 0.1, "adam": 0.01, "rmsprop": 0.01, "nadam": 0.01, "adamax": 0.01}
SCHEDULE_KWARGS = {
    "factor": ("FactorScheduler", dict(step=4, factor=0.7, base_lr=0.05)),
    "multifactor": ("MultiFactorScheduler", dict(step=[2, 5, 9], factor=0.5, base_lr=0.05)),
    "poly": ("PolyScheduler", dict(max_update=10, base_lr=0.05, pwr=2, final_lr=0.001, warmup_steps=3,
                                   warmup_begin_lr=0.01)),
    "cosine": ("CosineScheduler", dict(max_update=10, base_lr=0.05, final_lr=0.001, warmup_steps=2,
                                       warmup_mode="constant", warmup_begin_lr=0.02)),
}
# (gradxform's scheduler, the reference's own transcription of MXNet's): the same arguments
SCHEDULES = {k: (lambda c=c, kw=kw: getattr(gx.lr_scheduler, c)(**kw),
                 lambda c=c, kw=kw: getattr(mxs, c)(**kw)) for k, (c, kw) in SCHEDULE_KWARGS.items()}


def problem(dtype, steps=12, seed=0):
    rng = np.random.RandomState(seed)
    w0 = [rng.randn(*s).astype(dtype) for s in SHAPES]
    grads = [[(rng.randn(*s) * (3.0 if t % 4 == 0 else 0.5)).astype(dtype) for s in SHAPES]
             for t in range(steps)]
    return w0, grads


def run_both(name, common, sched=None, dtype=np.float32, lr_mult=None, wd_mult=None):
    w0, grads = problem(dtype)
    lr = LR.get(name, 0.05)
    kwargs = dict(OWN.get(name, {}), **common)
    mults = {}
    if lr_mult is not None:
        mults["lr_mults"] = lr_mult[1]
    if wd_mult is not None:
        mults["wd_mults"] = wd_mult[1]
    ref = Reference(name, learning_rate=None if sched else lr, lr_scheduler=sched[1]() if sched else None,
                    **mults, **({"ftrl_lr": lr} if name == "ftrl" else {}), **kwargs)
    tx = gx.create(name, **({} if sched or lr is None else {"learning_rate": lr}),
                   **({"lr_scheduler": sched[0]()} if sched else {}),
                   **({"lr_mult": lr_mult[0]} if lr_mult else {}),
                   **({"wd_mult": wd_mult[0]} if wd_mult else {}), **kwargs)
    params = {"enc": {"dense0_weight": jnp.asarray(w0[0]), "dense0_bias": jnp.asarray(w0[1])},
              "head": {"bn_gamma": jnp.asarray(w0[2])}}
    assert gx.param_names(params) == ["enc/dense0_bias", "enc/dense0_weight", "head/bn_gamma"]
    order = [1, 0, 2]  # MXNet index i = leaf order[i]... rebuilt below in leaf order
    del order
    leaf_w0 = [w0[1], w0[0], w0[2]]
    state = tx.init(params)
    # op by op: no compile per configuration; the compiled step is checked against the goldens
    step = lambda p, s, g: (lambda u, s2: (gx.apply_updates(p, u), s2))(*tx.update(g, s, p))  # noqa: E731
    ref_w = leaf_w0
    for g in grads:
        leaf_g = [g[1], g[0], g[2]]
        ref_w = ref.step(ref_w, leaf_g)
        tree_g = {"enc": {"dense0_weight": jnp.asarray(g[0]), "dense0_bias": jnp.asarray(g[1])},
                  "head": {"bn_gamma": jnp.asarray(g[2])}}
        params, state = step(params, state, tree_g)
        got = jax.tree.leaves(params)
        tol = dict(rtol=1e-3, atol=1e-3) if dtype == np.float16 else dict(rtol=2e-5, atol=2e-6)
        for a, b, nm in zip(got, ref_w, sorted(NAMES)):
            assert a.dtype == b.dtype, nm
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), err_msg=nm, **tol)
    return params


ALL = sorted(OWN)
COMMON = dict(wd=0.01, rescale_grad=0.5, clip_gradient=1.5)


@pytest.mark.parametrize("name", ALL)
def test_plain(name):
    run_both(name, {})


@pytest.mark.parametrize("name", ALL)
def test_wd_rescale_clip_and_begin(name):
    run_both(name, dict(COMMON, begin_num_update=3))


@pytest.mark.parametrize("name", ["sgd", "adam", "nag", "lbsgd", "ftrl", "signum"])
@pytest.mark.parametrize("sched", sorted(SCHEDULES))
def test_schedules(name, sched):
    run_both(name, COMMON, sched=SCHEDULES[sched])


@pytest.mark.parametrize("name", ["sgd", "adam", "rmsprop", "adagrad", "nadam", "ftrl"])
def test_multipliers_by_name_and_glob(name):
    # leaf order: 0 enc/dense0_bias, 1 enc/dense0_weight, 2 head/bn_gamma
    run_both(name, COMMON, lr_mult=({"enc/*_bias": 2.0, "head/bn_gamma": 0.5}, {0: 2.0, 2: 0.5}),
             wd_mult=({"head/*": 0.0}, {2: 0.0}))


@pytest.mark.parametrize("name", ["sgd", "nag", "adam", "rmsprop", "ftml", "adamax"])
def test_float16_master_weights(name):
    run_both(name, dict(COMMON, multi_precision=True), dtype=np.float16)


def test_scheduler_transcription_reproduces_mxnets_recorded_rates():
    """The reference's schedulers against MXNet 1.9.1's own (goldens/mxnet/schedulers.npz,
    num_update 1..60, every kind with and without warmup): float64 both sides, rtol 1e-12."""
    z = np.load(os.path.join(os.path.dirname(__file__), "goldens", "mxnet", "schedulers.npz"))
    meta = json.loads(str(z["meta"]))
    assert len(meta["schedulers"]) == 14
    for key, spec in meta["schedulers"].items():
        sched = getattr(mxs, spec["type"])(**spec["kwargs"])
        got = [sched(n) for n in meta["num_update"]]
        np.testing.assert_allclose(got, z["lr_" + key], rtol=1e-12, atol=0, err_msg=key)
