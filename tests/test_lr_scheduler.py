"""MXNet schedulers against values MXNet 1.9.1 returned for num_update = 1..60
(tests/goldens/mxnet/schedulers.npz). Tolerance rtol 1e-6: MXNet computes in
float64, gradxform in float32 (the optimizer kernels take float32 anyway)."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from goldens_io import GOLDENS

with np.load(GOLDENS / "mxnet" / "schedulers.npz") as _z:
    META = json.loads(str(_z["meta"]))
    VALUES = {k: _z[f"lr_{k}"] for k in META["schedulers"]}


@pytest.mark.parametrize("key", sorted(META["schedulers"]))
def test_matches_mxnet(key):
    spec = META["schedulers"][key]
    sched = getattr(gx.lr_scheduler, spec["type"])(**spec["kwargs"])
    t = np.asarray(META["num_update"])
    got = np.asarray(jax.jit(sched)(t))
    np.testing.assert_allclose(got, VALUES[key], rtol=1e-6, atol=1e-9)
    # one value at a time agrees with the vectorised form (it is a pure function)
    np.testing.assert_allclose(float(sched(int(t[17]))), got[17], rtol=1e-6)


def test_base_lr_argument_replaces_the_schedulers_own():
    s = gx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    np.testing.assert_allclose(np.asarray(s(jnp.arange(1, 6), 0.2)), [0.2, 0.2, 0.1, 0.1, 0.05], rtol=1e-6)


@pytest.mark.parametrize("make, message", [
    (lambda: gx.lr_scheduler.FactorScheduler(step=0), "step"),
    (lambda: gx.lr_scheduler.FactorScheduler(step=2, factor=1.5), "factor"),
    (lambda: gx.lr_scheduler.MultiFactorScheduler(step=[5, 3]), "increasing"),
    (lambda: gx.lr_scheduler.PolyScheduler(max_update=0), "max_update"),
    (lambda: gx.lr_scheduler.CosineScheduler(max_update=10, warmup_mode="exp"), "warmup_mode"),
    (lambda: gx.lr_scheduler.FactorScheduler(step=2, base_lr=0.1, warmup_begin_lr=0.5), "warmup_begin_lr"),
])
def test_bad_arguments_raise_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("max_update, warmup, base, final", [
    (1000, 0, 0.1, 0.0), (100000, 0, 0.5, 0.0), (5000, 250, 0.1, 1e-4), (37, 3, 1.0, 0.0)])
def test_cosine_last_tenth_matches_float64(max_update, warmup, base, final):
    """MXNet evaluates CosineScheduler in float64 Python; in float32 the form
    ``(1 + cos(pi x)) / 2`` lost digits near the end (1.1e-5 relative): the
    last 10% of the decay (and the end value) at rtol 1e-6, every step."""
    sched = gx.lr_scheduler.CosineScheduler(max_update, base_lr=base, final_lr=final, warmup_steps=warmup)
    t = np.arange(max_update - (max_update - warmup) // 10, max_update + 3)
    got = np.asarray(jax.jit(sched)(t), np.float64)
    steps = max_update - warmup
    x = np.minimum(t, max_update) - warmup
    want = final + (base - final) * (1 + np.cos(np.pi * x / steps)) / 2
    np.testing.assert_allclose(got[t < max_update], want[t < max_update], rtol=1e-6, atol=0)
    np.testing.assert_allclose(got[t >= max_update], final, rtol=1e-6, atol=0)
    # and the whole decay, including the warmup boundary
    t_all = np.arange(warmup, max_update + 1)
    x = t_all - warmup
    want_all = final + (base - final) * (1 + np.cos(np.pi * x / steps)) / 2
    np.testing.assert_allclose(np.asarray(jax.jit(sched)(t_all), np.float64)[:-1], want_all[:-1],
                               rtol=1e-6, atol=0)
