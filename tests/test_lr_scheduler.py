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


def _loss(p, b):
    return jnp.sum(b @ p["w"])


def test_optimizer_writes_its_learning_rate_into_the_schedulers_base_lr():
    # MXNet 1.9.1 (Optimizer.__init__ sets lr_scheduler.base_lr = learning_rate):
    # FactorScheduler(step=2, factor=0.5) under SGD(learning_rate=0.1, momentum=0.9)
    # gives base_lr 0.1 after construction and 0.025 at num_update 5
    sched = gx.lr_scheduler.FactorScheduler(step=2, factor=0.5)
    tr = gx.Trainer({"w": jnp.ones((3,))}, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "lr_scheduler": sched})
    assert sched.base_lr == 0.1
    for _ in range(5):
        tr.step(tr.grads(_loss, jnp.ones((4, 3))), 4)
    assert tr.learning_rate == 0.025
    assert float(sched(tr.optimizer.num_update)) == pytest.approx(0.025)  # a script's logging line
    # the pure transformation binds it too; without learning_rate the scheduler's own base is used
    s2 = gx.lr_scheduler.MultiFactorScheduler(step=[2], factor=0.5, base_lr=0.3)
    gx.mxnet.sgd(learning_rate=0.2, lr_scheduler=s2)
    assert s2.base_lr == 0.2
    s3 = gx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.3)
    state = gx.mxnet.sgd(lr_scheduler=s3).init({"w": jnp.ones(3)})
    assert s3.base_lr == 0.3 and float(gx.get_hyper(state, "learning_rate")) == pytest.approx(0.3)


@pytest.mark.parametrize("cls", ["FactorScheduler", "MultiFactorScheduler"])
def test_base_lr_assigned_after_binding_is_refused(cls):
    # MXNet's stateful scheduler goes on from a new base_lr; gradxform's step reads
    # the base from its state, so the assignment raises at once, saying what to type
    step = 100 if cls == "FactorScheduler" else [100]
    sched = getattr(gx.lr_scheduler, cls)(step=step, factor=0.5)
    sched.base_lr = 0.05  # not bound yet: allowed
    tr = gx.Trainer({"w": jnp.ones((3,))}, "sgd", {"learning_rate": 0.1, "lr_scheduler": sched})
    tr.step(tr.grads(_loss, jnp.ones((4, 3))), 4)
    with pytest.raises(AttributeError, match=r"set_hyper\(state, learning_rate="):
        sched.base_lr = 0.01
    assert sched.base_lr == 0.1 and tr.learning_rate == 0.1
    # Poly/Cosine compute from their constructor's base in MXNet too: the assignment changes no rate
    cos = gx.lr_scheduler.CosineScheduler(max_update=10, base_lr=0.1)
    gx.mxnet.sgd(learning_rate=0.1, lr_scheduler=cos)
    cos.base_lr = 0.01
    assert float(cos(3)) == pytest.approx(0.07938926261462366, rel=1e-6)  # MXNet 1.9.1


def test_user_subclass_base_lr_stays_assignable():
    class Warm(gx.lr_scheduler.LRScheduler):
        def __call__(self, num_update):
            return self.base_lr * jnp.minimum(1.0, num_update / 3)

    w = Warm()
    gx.mxnet.sgd(learning_rate=0.2, lr_scheduler=w)
    assert w.base_lr == 0.2
    w.base_lr = 0.3
    assert w(3) == pytest.approx(0.3)
