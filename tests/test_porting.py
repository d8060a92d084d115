"""Issue 16: a porting user's schedules and idioms, as their users write them, with
numbers checked against each framework's rule (float32: the lr is one float32
multiply away from the update, so rtol 1e-6 unless said otherwise)."""
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


@pytest.mark.parametrize("make", [lambda: S.PaddlePiecewiseDecay([2, 4], [0.1, 0.01, 0.001]),
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
    if isinstance(sched, S.PaddlePiecewiseDecay):
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


# -- selectors and framework idioms -------------------------------------------------------

NET = {"bn": {"beta": jnp.full(2, 0.5), "gamma": jnp.full(2, 2.0)},
       "dense": {"bias": jnp.full(2, -1.0), "weight": jnp.full((2, 2), 3.0)}}
GRAD = jax.tree.map(lambda x: jnp.full_like(x, 0.25), NET)


class Param:
    """A parameter object as MindSpore and Gluon hand them around: a .name (and Gluon's mults)."""

    def __init__(self, name, lr_mult=1.0, wd_mult=1.0):
        self.name, self.lr_mult, self.wd_mult = name, lr_mult, wd_mult


def one_update(tx, params=NET, grads=GRAD):
    u, _ = tx.update(grads, tx.init(params), params)
    return u


def test_gluon_regex_as_wd_mult_key():
    # Gluon: net.collect_params('.*beta|.*gamma|.*bias').setattr('wd_mult', 0.0); MXNet SGD:
    # w -= lr * (g + wd * wd_mult * w)
    u = one_update(gx.create("sgd", learning_rate=0.1, wd=0.01, wd_mult={".*beta|.*gamma|.*bias": 0.0}))
    for name, g, w in zip(gx.param_names(NET), jax.tree.leaves(GRAD), jax.tree.leaves(NET)):
        decayed = not re.match(".*beta|.*gamma|.*bias", name)
        expect = -np.float32(0.1) * (np.float32(0.25) + (np.float32(0.01) * w if decayed else 0))
        np.testing.assert_allclose(jax.tree.leaves(u)[gx.param_names(NET).index(name)], expect, rtol=1e-6)
    with pytest.raises(ValueError, match="matches no parameter"):
        gx.create("sgd", wd_mult={".*running_mean": 0.0}).init(NET)


def test_selector_reads_names_globs_regexes_predicates_and_objects():
    from gradxform._selectors import Selector
    names = gx.param_names(NET)   # bn/beta bn/gamma dense/bias dense/weight
    pick = lambda spec: [n for n, b in zip(names, Selector(spec).select(names)) if b]  # noqa: E731
    assert pick("dense/bias") == ["dense/bias"]
    assert pick("*/b*") == ["bn/beta", "dense/bias"]                          # glob
    assert pick(".*beta|.*gamma") == ["bn/beta", "bn/gamma"]                  # Gluon regex, re.match
    assert pick("bn.*") == ["bn/beta", "bn/gamma"]                             # no glob match: regex
    assert pick(re.compile("dense")) == ["dense/bias", "dense/weight"]
    assert pick(lambda n: n.endswith("weight")) == ["dense/weight"]            # predicate over names
    assert pick(lambda x: "gamma" in x.name) == ["bn/gamma"]                   # ... over parameter objects
    assert pick([Param("bn/beta"), "dense/weight"]) == ["bn/beta", "dense/weight"]


def test_mindspore_positional_signature_with_group_params_of_parameter_objects():
    trainable = [Param(n) for n in gx.param_names(NET)]
    bn_params = list(filter(lambda x: "bn" in x.name, trainable))
    rest = list(filter(lambda x: "bn" not in x.name, trainable))
    group_params = [{"params": bn_params, "weight_decay": 0.0}, {"params": rest, "lr": 0.05},
                    {"order_params": trainable}]
    # nn.Momentum(group_params, learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=2.0)
    tx = gx.mindspore.Momentum(group_params, 0.1, 0.9, weight_decay=0.01, loss_scale=2.0)
    same = gx.create("mindspore.Momentum", params=group_params, learning_rate=0.1, momentum=0.9,
                     weight_decay=0.01, loss_scale=2.0)
    u, v = one_update(tx), one_update(same)
    for name, g, w, a, b in zip(gx.param_names(NET), jax.tree.leaves(GRAD), jax.tree.leaves(NET),
                                jax.tree.leaves(u), jax.tree.leaves(v)):
        lr, wd = (0.1, 0.0) if "bn" in name else (0.05, 0.01)
        # ApplyMomentum, first step: v = g' ; w -= lr * v, g' = (g + wd * loss_scale * w) / loss_scale
        expect = -np.float32(lr) * ((np.float32(g) + np.float32(wd) * np.float32(2.0) * w) / np.float32(2.0))
        np.testing.assert_allclose(a, expect, rtol=1e-6)
        np.testing.assert_array_equal(a, b)


def test_mindspore_params_list_optimizes_only_those_and_filters_read_x_name():
    only = [Param("dense/weight"), Param("dense/bias")]
    u = one_update(gx.mindspore.SGD(only, 0.1))           # nn.SGD(params, learning_rate=0.1)
    assert float(jnp.abs(u["bn"]["beta"]).max()) == 0.0   # not in params: not optimized
    np.testing.assert_allclose(u["dense"]["weight"], -0.025, rtol=1e-6)
    # decay_filter / lars_filter written for MindSpore Parameters (x.name)
    inner = gx.mindspore.momentum(0.1, 0.0)
    lars = gx.mindspore.lars(inner, lars_filter=lambda x: "bias" not in x.name, weight_decay=0.01,
                             decay_filter=lambda x: "beta" not in x.name and "gamma" not in x.name)
    ref = gx.mindspore.lars(inner, lars_filter=lambda n: "bias" not in n, weight_decay=0.01,
                            decay_filter=lambda n: "beta" not in n and "gamma" not in n)
    for a, b in zip(jax.tree.leaves(one_update(lars)), jax.tree.leaves(one_update(ref))):
        np.testing.assert_array_equal(a, b)
    u = one_update(lars)
    w, g = np.float32(3.0), np.float32(0.25)   # dense/weight: 2x2 of 3.0, grads 0.25
    wn, gn = np.sqrt(np.float32(4) * w * w), np.sqrt(np.float32(4) * g * g)
    ratio = np.float32(0.001) * wn / (gn + np.float32(0.01) * wn + np.float32(1e-5))
    np.testing.assert_allclose(u["dense"]["weight"], -0.1 * ratio * (g + np.float32(0.01) * w), rtol=1e-5)
    np.testing.assert_allclose(u["dense"]["bias"], -0.1 * 0.25, rtol=1e-6)   # filtered out: plain g


def test_mxnet_param_dict_aggregate_num_use_fused_step_and_clip_gradient_le_0():
    names = gx.param_names(NET)
    # Gluon's Trainer: param_dict = {i: parameter}; a parameter's lr_mult/wd_mult win (_get_lr/_get_wd)
    pd = {i: Param(n, lr_mult=2.0 if "dense" in n else 1.0, wd_mult=0.0 if "bn" in n else 1.0)
          for i, n in enumerate(names)}
    tx = gx.create("sgd", learning_rate=0.1, wd=0.01, param_dict=pd, lr_mult={"dense/*": 5.0},
                   aggregate_num=4, use_fused_step=True)
    u = one_update(tx)
    for i, (g, w, a) in enumerate(zip(jax.tree.leaves(GRAD), jax.tree.leaves(NET), jax.tree.leaves(u))):
        lr = np.float32(0.1) * np.float32(pd[i].lr_mult)
        expect = -lr * (np.float32(0.25) + np.float32(0.01) * np.float32(pd[i].wd_mult) * w)
        np.testing.assert_allclose(a, expect, rtol=1e-6)
    plain = one_update(gx.create("sgd", learning_rate=0.1, wd=0.01))
    for clip in (0.0, -1.0):   # MXNet's kernels: clip_gradient <= 0 is no clipping
        for a, b in zip(jax.tree.leaves(one_update(gx.create("sgd", learning_rate=0.1, wd=0.01,
                                                                clip_gradient=clip))), jax.tree.leaves(plain)):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="aggregate_num"):
        gx.create("adam", aggregate_num=0)


def test_resume_from_gluon_has_a_fast_mode():
    import pathlib
    import subprocess
    import sys
    root = pathlib.Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "examples" / "resume_from_gluon.py"), "--fast"],
                         capture_output=True, text=True, timeout=300, cwd=root,
                         env={**__import__("os").environ, "PYTHONPATH": str(root / "src")}).stdout
    rows = [r.split() for r in out.splitlines()[1:]]
    assert [r[1] for r in rows].count("gradxform") == 5 and all(float(r[4]) <= 1e-6 for r in rows if len(r) == 5)


def test_paddle_takes_parameter_objects_as_model_parameters_hands_them_out():
    # paddle.optimizer.Momentum(learning_rate=0.1, parameters=model.parameters()): objects with a .name
    only = [Param("dense/weight"), Param("dense/bias")]
    u = one_update(gx.paddle.Momentum(learning_rate=0.1, momentum=0.9, parameters=only))
    assert float(jnp.abs(u["bn"]["beta"]).max()) == 0.0   # not in parameters: not optimized
    # Paddle Momentum, first step: v = g; w -= lr * v
    np.testing.assert_allclose(u["dense"]["weight"], -np.float32(0.1) * np.float32(0.25), rtol=1e-6)
    # groups of objects (and of names, mixed), each with its own learning-rate ratio
    groups = [{"params": [Param("dense/weight"), "dense/bias"], "learning_rate": 0.5},
              {"params": [Param("bn/beta"), Param("bn/gamma")]}]
    u = one_update(gx.paddle.Momentum(learning_rate=0.1, momentum=0.9, parameters=groups))
    by_names = [{"params": ["dense/weight", "dense/bias"], "learning_rate": 0.5}, {"params": ["bn/beta", "bn/gamma"]}]
    v = one_update(gx.paddle.Momentum(learning_rate=0.1, momentum=0.9, parameters=by_names))
    for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(v)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(u["dense"]["bias"], -np.float32(0.05) * np.float32(0.25), rtol=1e-6)
    np.testing.assert_allclose(u["bn"]["beta"], -np.float32(0.1) * np.float32(0.25), rtol=1e-6)


def test_mindspore_params_may_mix_names_and_parameter_objects():
    mixed = [Param("dense/weight"), "dense/bias"]
    u = one_update(gx.mindspore.SGD(mixed, 0.1))
    assert float(jnp.abs(u["bn"]["gamma"]).max()) == 0.0
    np.testing.assert_allclose(u["dense"]["bias"], -0.025, rtol=1e-6)


# -- issue 24 item 5: param_idx2name by name, never by leaf position ---------------------------

FIT_NAMES = ["conv0_weight", "bn0_gamma", "bn0_beta", "fc1_weight", "fc1_bias"]   # MXNet's index order


def _mxnet_module_sgd_step(w, g, lr, wd, names):
    """MXNet 1.9.1 SGD (no momentum) after ``Optimizer.set_wd_mult`` with
    param_idx2name: a parameter whose name does not end in ``_weight`` or
    ``_gamma`` gets wd_mult 0; then ``w -= lr * (g + wd * wd_mult * w)``."""
    out = {}
    for n in names:
        mult = 1.0 if (n.endswith("_weight") or n.endswith("_gamma")) else 0.0
        out[n] = w[n] - lr * (g[n] + wd * mult * w[n])
    return out


def test_param_idx2name_applies_mxnets_decay_rule_by_name_not_by_leaf_order():
    rng = np.random.default_rng(0)
    w64 = {n: rng.normal(size=3) for n in FIT_NAMES}
    g64 = {n: rng.normal(size=3) for n in FIT_NAMES}
    params = {n: jnp.asarray(v, jnp.float32) for n, v in w64.items()}
    grads = {n: jnp.asarray(v, jnp.float32) for n, v in g64.items()}
    assert gx.param_names(params) != FIT_NAMES   # JAX's sorted order is not MXNet's index order
    tx = gx.create("sgd", learning_rate=0.1, wd=0.1, param_idx2name=dict(enumerate(FIT_NAMES)))
    u, _ = tx.update(grads, tx.init(params), params)
    want = _mxnet_module_sgd_step(w64, g64, 0.1, 0.1, FIT_NAMES)
    for n in FIT_NAMES:   # float32 step against float64: rtol 1e-6
        np.testing.assert_allclose(params[n] + u[n], want[n], rtol=1e-6, atol=1e-7, err_msg=n)


def test_param_idx2name_names_list_leaves_by_their_index():
    # a list of arrays (Module/Updater style): leaf '3' is MXNet's index 3
    rng = np.random.default_rng(1)
    w64 = {n: rng.normal(size=2) for n in FIT_NAMES}
    g64 = {n: rng.normal(size=2) for n in FIT_NAMES}
    params = [jnp.asarray(w64[n], jnp.float32) for n in FIT_NAMES]
    grads = [jnp.asarray(g64[n], jnp.float32) for n in FIT_NAMES]
    tx = gx.create("sgd", learning_rate=0.1, wd=0.1, param_idx2name=dict(enumerate(FIT_NAMES)))
    u, _ = tx.update(grads, tx.init(params), params)
    want = _mxnet_module_sgd_step(w64, g64, 0.1, 0.1, FIT_NAMES)
    for i, n in enumerate(FIT_NAMES):
        np.testing.assert_allclose(params[i] + u[i], want[n], rtol=1e-6, atol=1e-7, err_msg=n)


def test_param_idx2name_that_names_no_leaf_is_an_error_saying_how_to_pass_it():
    params = {"conv": {"weight": jnp.ones(2)}, "fc": {"bias": jnp.ones(2)}}
    tx = gx.create("sgd", wd=0.1, param_idx2name={0: "conv0_weight", 1: "fc1_bias"})
    with pytest.raises(ValueError, match=r"mxnet.sgd\(param_idx2name=...\).*never by position.*param_names"):
        tx.init(params)


def test_param_idx2name_takes_parameter_objects_as_gluon_hands_them_out():
    params = {n: jnp.full(2, 1.5) for n in FIT_NAMES}
    grads = {n: jnp.full(2, 0.5) for n in FIT_NAMES}
    by_obj = gx.create("sgd", learning_rate=0.1, wd=0.1, param_idx2name={i: Param(n) for i, n in enumerate(FIT_NAMES)})
    by_name = gx.create("sgd", learning_rate=0.1, wd=0.1, param_idx2name=dict(enumerate(FIT_NAMES)))
    a, _ = by_obj.update(grads, by_obj.init(params), params)
    b, _ = by_name.update(grads, by_name.init(params), params)
    for n in FIT_NAMES:
        np.testing.assert_array_equal(a[n], b[n])
    np.testing.assert_allclose(a["fc1_bias"], -0.05, rtol=1e-6)                     # not decayed
    np.testing.assert_allclose(a["fc1_weight"], -0.1 * (0.5 + 0.1 * 1.5), rtol=1e-6)  # decayed
