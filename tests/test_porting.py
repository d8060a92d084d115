"""Issue 16: a porting user's schedules and idioms, as their users write them, with
numbers checked against each framework's rule (float32: the lr is one float32
multiply away from the update, so rtol 1e-6 unless said otherwise)."""
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform import schedules as S
from gradxform.schedules import mxnet_style, optax_style

PARAMS = {"w": jnp.ones(3)}
ONES = {"w": jnp.ones(3)}


def applied_lrs(tx, n=6, params=PARAMS):
    """The learning rate each update applied, read off ``u = -lr * g`` with g = 1."""
    state, out = tx.init(params), []
    step = jax.jit(tx.update)
    for _ in range(n):
        u, state = step(ONES, state, params)
        out.append(-float(u["w"][0]))
    return out


# -- schedules: anything a user already has ----------------------------------------------

class GluonStyleScheduler:
    """A user's MXNet-protocol class: one argument, a base_lr attribute (traceable)."""

    def __init__(self, base_lr=0.1):
        self.base_lr = base_lr

    def __call__(self, num_update):
        return self.base_lr * 0.5 ** (num_update // 3)


class LRSequentialLike:
    """GluonCV's LRSequential in miniature: Python control flow and mutable state."""

    def __init__(self, base_lr=0.1, warmup=2):
        self.base_lr, self.warmup, self.calls, self.learning_rate = base_lr, warmup, 0, 0.0

    def __call__(self, num_update):
        self.calls += 1
        if num_update < self.warmup:
            self.learning_rate = self.base_lr * (num_update + 1) / (self.warmup + 1)
        else:
            self.learning_rate = self.base_lr * min(1.0, 4.0 / (num_update + 2))
        return self.learning_rate


def test_one_arg_mxnet_protocol_class_as_lr_scheduler():
    sched = GluonStyleScheduler(0.1)
    got = applied_lrs(gx.create("sgd", lr_scheduler=sched), 7)
    # MXNet: lr_scheduler(num_update), num_update = 1 on the first update
    np.testing.assert_allclose(got, [np.float32(0.1 * 0.5 ** (n // 3)) for n in range(1, 8)], rtol=1e-6)


def test_explicit_learning_rate_becomes_the_schedulers_base_lr_as_in_mxnet():
    sched = GluonStyleScheduler(0.1)
    got = applied_lrs(gx.create("sgd", learning_rate=0.4, lr_scheduler=sched), 4)
    assert sched.base_lr == 0.4
    np.testing.assert_allclose(got, [0.4 * 0.5 ** (n // 3) for n in range(1, 5)], rtol=1e-6)


@pytest.mark.parametrize("name, key", [("sgd", "learning_rate"), ("sgd", "lr_scheduler"),
                                       ("mindspore.sgd", "learning_rate"), ("paddle.asgd", "learning_rate")])
def test_optax_schedule_counts_from_zero_everywhere(name, key):
    sched = optax.exponential_decay(0.1, transition_steps=1, decay_rate=0.5)
    got = applied_lrs(gx.create(name, **{key: sched}), 5)
    np.testing.assert_allclose(got, [float(sched(k)) for k in range(5)], rtol=1e-6)


def test_wrappers_say_which_convention_a_bare_callable_uses():
    f = lambda t: 0.1 / (1.0 + t)  # noqa: E731
    assert applied_lrs(gx.create("sgd", lr_scheduler=f), 2) == pytest.approx([0.1 / 2, 0.1 / 3])  # default
    assert applied_lrs(gx.create("sgd", lr_scheduler=optax_style(f)), 2) == pytest.approx([0.1, 0.1 / 2])
    assert applied_lrs(gx.create("mindspore.sgd", learning_rate=f), 2) == pytest.approx([0.1, 0.1 / 2])
    assert applied_lrs(gx.create("mindspore.sgd", learning_rate=mxnet_style(f)), 2) == pytest.approx([0.1 / 2, 0.1 / 3])


def test_untraceable_schedule_raises_at_construction_naming_the_two_ways_out():
    with pytest.raises(TypeError, match=r"cannot run inside jit.*Trainer\(params, 'mxnet.sgd'.*get_updater"
                                        r".*set_learning_rate") as err:
        gx.create("sgd", lr_scheduler=LRSequentialLike())
    assert "Tracer" in str(err.value) or "attributes" in str(err.value)
    with pytest.raises(TypeError, match="cannot run inside jit"):
        gx.create("mindspore.momentum", learning_rate=optax_style(LRSequentialLike()), momentum=0.9)


def test_untraceable_schedule_drives_a_trainer_for_100_steps_with_one_compilation():
    sched, ref = LRSequentialLike(0.1), LRSequentialLike(0.1)
    trainer = gx.Trainer(PARAMS, "sgd", {"lr_scheduler": sched}, fused=False)
    traces = []
    loss = lambda p, b: (traces.append(1), jnp.sum(p["w"] * b))[1]  # noqa: E731
    step = trainer.compile_step(loss)
    w = np.ones(3, np.float64)
    for k in range(1, 101):
        step(jnp.ones((trainer.num_devices, 3)), trainer.num_devices)
        w = np.float32(w - np.float32(ref(k)) * 1.0)
        assert trainer.learning_rate == pytest.approx(ref.learning_rate, rel=1e-6)
    assert len(traces) == 1
    np.testing.assert_allclose(np.asarray(trainer.params["w"]), w, rtol=1e-5)
    with pytest.raises(UserWarning):
        trainer.set_learning_rate(0.1)


def test_untraceable_schedule_in_a_fused_trainer_and_the_updater():
    ref = LRSequentialLike(0.2)
    trainer = gx.Trainer(PARAMS, "sgd", {"lr_scheduler": LRSequentialLike(0.2)})
    updater = gx.mxnet.get_updater("sgd", {"lr_scheduler": LRSequentialLike(0.2)})
    w = np.ones(3, np.float32)
    for k in range(1, 6):
        trainer.step(jax.tree.map(lambda x: jnp.ones((trainer.num_devices,) + x.shape), PARAMS),
                     trainer.num_devices)
        updater(0, np.ones(3, np.float32), w)   # updated in place, as MXNet's NDArray
        expect = 1.0 - sum(np.float32(ref(j)) for j in range(1, k + 1))
        np.testing.assert_allclose(np.asarray(trainer.params["w"]), expect, rtol=1e-6)
        np.testing.assert_allclose(w, expect, rtol=1e-6)


@pytest.mark.parametrize("make", [lambda: S.PiecewiseDecay([2, 4], [0.1, 0.01, 0.001]),
                                  lambda: S.MultiFactorScheduler([2, 4], 0.1, base_lr=0.1)])
def test_the_same_schedule_object_gives_the_same_lr_under_every_family(make):
    sched = make()
    runs = {
        "mxnet.sgd": gx.create("sgd", lr_scheduler=sched),
        "mindspore.sgd": gx.create("mindspore.sgd", learning_rate=sched),
        "mindspore.momentum": gx.create("mindspore.momentum", learning_rate=sched, momentum=0.0),
        "paddle.asgd": gx.create("paddle.asgd", learning_rate=sched),
    }
    got = {k: applied_lrs(tx, 7) for k, tx in runs.items()}
    # the framework's own reading: Paddle calls scheduler.step() after opt.step() (update k reads
    # last_epoch = k - 1); MXNet reads lr_scheduler(num_update = k)
    if isinstance(sched, S.PiecewiseDecay):
        expect = [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.001]
    else:
        expect = [0.1, 0.1, 0.01, 0.01, 0.001, 0.001, 0.001]
    for k, v in got.items():
        np.testing.assert_allclose(v, expect, rtol=1e-6, err_msg=k)


# -- Flax NNX and jit ---------------------------------------------------------------------

def test_hyper_on_an_nnx_optimizer_and_inside_jit():
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, gx.create("sgd", learning_rate=0.1, momentum=0.9), wrt=nnx.Param)
    assert gx.get_learning_rate(opt.opt_state) == pytest.approx(0.1)
    assert float(gx.get_hyper(opt.opt_state, "momentum")) == pytest.approx(0.9)
    gx.set_learning_rate(opt.opt_state, 0.01)            # written into the nnx Variables in place
    assert gx.get_learning_rate(opt.opt_state) == pytest.approx(0.01)
    gx.set_hyper(opt.opt_state, momentum=0.5)
    assert float(gx.get_hyper(opt.opt_state, "momentum")) == 0.5

    @nnx.jit
    def step(model, opt, x):
        grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(model)
        opt.update(model, grads)
        return gx.get_learning_rate(opt.opt_state)

    before = np.asarray(model.kernel[...])
    assert float(step(model, opt, jnp.ones((4, 2)))) == pytest.approx(0.01)
    assert not np.allclose(before, np.asarray(model.kernel[...]))

    tx = gx.create("adam", lr_scheduler=S.FactorScheduler(step=1, factor=0.5, base_lr=0.1))
    state = tx.init(PARAMS)

    @jax.jit
    def jitted(state):
        state = gx.set_hyper(state, beta1=0.8)
        return gx.get_learning_rate(state), gx.get_hyper(state, "beta1")

    lr, b1 = jitted(state)
    assert float(lr) == pytest.approx(gx.get_learning_rate(state)) and float(b1) == pytest.approx(0.8)
    lr = jax.jit(lambda s: gx.get_learning_rate(gx.set_learning_rate(s, 0.3)))(gx.create("sgd").init(PARAMS))
    assert float(lr) == pytest.approx(0.3)
