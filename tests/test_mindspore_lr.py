"""MindSpore's learning-rate objects as MindSpore 2.10.0 runs them (CPU, PYNATIVE;
tests/goldens/mindspore/objects/lr_schedule.npz, tools/mindspore_lr_goldens.py): the six
``LearningRateSchedule`` classes over global_step 0..39, the seven ``dynamic_lr`` builders'
lists, and model-zoo BERT's warmup + polynomial subclass (``construct(self, global_step)``)
as ``learning_rate=`` of ``nn.AdamWeightDecay`` and ``nn.Momentum`` for 10 steps.

Each value is also checked against a float64 transcription of MindSpore's formulas written
below (never calling gradxform). Tolerances: schedule values are float32 in both (XLA may
fuse a division into a multiplication): rtol 1e-6 (CosineDecayLR's sin form: 1e-6 with atol
1e-9); dynamic_lr lists are Python floats in both: 1e-12; params after 10 float32 updates:
rtol 2e-6, atol 1e-7 (float64 reference, with MindSpore's float32 hyperparameters: rtol 2e-6,
atol 5e-7).
"""
import inspect
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
import gradxform.mindspore as nn
from goldens_io import GOLDENS

with np.load(GOLDENS / "mindspore" / "objects" / "lr_schedule.npz") as _z:
    G = {k: _z[k] for k in _z.files}
META = json.loads(str(G["meta"]))
STEPS = META["steps"]
NAMES = META["names"]


# ---------------------------------------------------------------- float64 transcription of MindSpore 2.10
def ref_schedule(kind, args, step):
    s = float(step)
    if kind in ("ExponentialDecayLR", "NaturalExpDecayLR", "InverseDecayLR"):
        lr, rate, steps, stair = (list(args) + [False])[:4]
        if kind == "NaturalExpDecayLR":
            p = math.floor(s / steps) * steps if stair else s
            return lr * math.e ** (-rate * p)
        p = math.floor(s / steps) if stair else s / steps
        return lr * rate ** p if kind == "ExponentialDecayLR" else lr / (1 + rate * p)
    if kind == "CosineDecayLR":
        lo, hi, steps = args
        return lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * min(s, steps) / steps))
    if kind == "PolynomialDecayLR":
        lr, end, steps, power, update = (list(args) + [False])[:5]
        horizon = steps * max(math.ceil(s / steps), 1) if update else steps
        p = (s if update else min(s, steps)) / horizon
        return (lr - end) * (1 - p) ** power + end
    if kind == "WarmUpLR":
        lr, steps = args
        return lr * min(s, steps) / steps
    raise KeyError(kind)


def ref_dynamic(fn, args):
    """The dynamic_lr lists from the documented formulas, current_epoch = floor(i / step_per_epoch)."""
    if fn == "piecewise_constant_lr":
        ms, lrs = args
        return [next(lr for m, lr in zip(ms, lrs) if i < m) for i in range(ms[-1])]
    if fn == "cosine_decay_lr":
        lo, hi, total, spe, de = args
        return [lo + 0.5 * (hi - lo) * (1 + math.cos(math.pi * min(i // spe, de) / de)) for i in range(total)]
    if fn == "warmup_lr":
        lr, total, spe, we = args
        return [lr * min(i // spe, we) / we for i in range(total)]
    if fn == "polynomial_decay_lr":
        lr, end, total, spe, de, power, update = (list(args) + [False])[:7]
        out = []
        for i in range(total):
            e = i // spe
            horizon, t = (de * max(math.ceil(e / de), 1), e) if update else (de, min(e, de))
            out.append((lr - end) * (1 - t / horizon) ** power + end)
        return out
    lr, rate, total, spe, de, stair = (list(args) + [False])[:6]
    out = []
    for i in range(total):
        e = i // spe
        if fn == "exponential_decay_lr":
            out.append(lr * rate ** (math.floor(e / de) if stair else e / de))
        elif fn == "natural_exp_decay_lr":
            out.append(lr * math.exp(-rate * (math.floor(e / de) * de if stair else e)))
        else:
            out.append(lr / (1 + rate * (math.floor(e / de) if stair else e / de)))
    return out


def ref_bert_lr(step, learning_rate, end_learning_rate, warmup_steps, decay_steps, power):
    if step < warmup_steps:
        return learning_rate * step / warmup_steps
    return (learning_rate - end_learning_rate) * (1 - min(step, decay_steps) / decay_steps) ** power \
        + end_learning_rate


def ref_run(optimizer, kwargs, w0, grads, lrs):
    """nn.AdamWeightDecay (adam.py `_update_run_op`: no bias correction, decay added to the
    update) / nn.Momentum (ApplyMomentum), in float64 with MindSpore's hyperparameters as the
    float32 Tensors it stores (1 - float32(0.999) is 1.00004673e-3: 4.7e-5 from 1e-3)."""
    b1, b2, eps = (float(np.float32(x)) for x in (0.9, 0.999, kwargs.get("eps", 1e-6)))
    w = [np.float64(x) for x in w0]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    out = []
    for t, gs in enumerate(grads):
        for i, g in enumerate(gs):
            g = np.float64(g)
            if optimizer == "AdamWeightDecay":
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                w[i] = w[i] - lrs[t] * (kwargs["weight_decay"] * w[i] + m[i] / (eps + np.sqrt(v[i])))
            else:
                m[i] = kwargs["momentum"] * m[i] + g
                w[i] = w[i] - lrs[t] * m[i]
        out.append([x.copy() for x in w])
    return out


# ---------------------------------------------------------------- user subclasses (MindSpore's protocol)
class BertLearningRate(nn.LearningRateSchedule):
    """model-zoo BERT's schedule, with jnp in place of mindspore.ops: its output has shape (1,)."""

    def __init__(self, learning_rate, end_learning_rate, warmup_steps, decay_steps, power):
        super().__init__()
        self.warmup_flag = warmup_steps > 0
        if self.warmup_flag:
            self.warmup_lr = nn.WarmUpLR(learning_rate, warmup_steps)
        self.decay_lr = nn.PolynomialDecayLR(learning_rate, end_learning_rate, decay_steps, power)
        self.warmup_steps = jnp.array([warmup_steps], jnp.float32)
        self.one = jnp.array([1.0], jnp.float32)

    def construct(self, global_step):
        decay_lr = self.decay_lr(global_step)
        if self.warmup_flag:
            is_warmup = (self.warmup_steps > global_step).astype(jnp.float32)
            warmup_lr = self.warmup_lr(global_step)
            return (self.one - is_warmup) * decay_lr + is_warmup * warmup_lr
        return decay_lr


class PythonBertLearningRate(nn.LearningRateSchedule):
    """The same schedule in plain Python (an `if` on global_step): JAX cannot trace it."""

    def __init__(self, learning_rate, end_learning_rate, warmup_steps, decay_steps, power):
        super().__init__()
        self.args = (learning_rate, end_learning_rate, warmup_steps, decay_steps, power)
        self.decay_lr = nn.PolynomialDecayLR(learning_rate, end_learning_rate, decay_steps, power)

    def construct(self, global_step):
        lr, _, warmup, _, _ = self.args
        if global_step < warmup:
            return nn.WarmUpLR(lr, warmup)(global_step)
        return self.decay_lr(global_step)


def run_data(key):
    n = len(NAMES)
    w0 = [G[f"{key}_w0_{i}"] for i in range(n)]
    grads = [[G[f"{key}_g_{t}_{i}"] for i in range(n)] for t in range(STEPS)]
    weights = [[G[f"{key}_w_{t}_{i}"] for i in range(n)] for t in range(STEPS)]
    lrs = [float(G[f"{key}_lr_{t}"]) for t in range(STEPS)]
    return w0, grads, weights, lrs


# ---------------------------------------------------------------- the classes and builders
@pytest.mark.parametrize("key", sorted(META["schedules"]))
def test_schedule_values_match_mindspore_and_float64(key):
    spec = META["schedules"][key]
    want = np.array([ref_schedule(spec["type"], spec["args"], s) for s in META["global_step"]])
    np.testing.assert_allclose(G[f"sched_{key}"], want, rtol=1e-6, atol=1e-9)  # the transcription is MindSpore's
    sched = getattr(nn, spec["type"])(*spec["args"])
    assert isinstance(sched, nn.LearningRateSchedule)
    got = np.asarray(jax.jit(sched)(jnp.asarray(META["global_step"])))
    np.testing.assert_allclose(got, G[f"sched_{key}"], rtol=1e-6, atol=1e-9)
    one_by_one = [float(sched.construct(s)) for s in META["global_step"]]  # MindSpore's protocol
    np.testing.assert_allclose(one_by_one, G[f"sched_{key}"], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("key", sorted(META["dynamic_lr"]))
def test_dynamic_lr_lists_match_mindspore_and_float64(key):
    spec = META["dynamic_lr"][key]
    got = getattr(nn, spec["fn"])(*spec["args"])
    assert isinstance(got, list) and all(type(v) is float for v in got)
    np.testing.assert_allclose(got, G[f"dyn_{key}"], rtol=1e-12, atol=0)
    np.testing.assert_allclose(got, ref_dynamic(spec["fn"], spec["args"]), rtol=1e-12, atol=1e-15)


def test_signatures_are_mindsporesigs():
    assert list(inspect.signature(nn.LearningRateSchedule).parameters) == []
    assert str(inspect.signature(nn.PolynomialDecayLR)) == \
        "(learning_rate, end_learning_rate, decay_steps, power, update_decay_steps=False)"
    assert str(inspect.signature(nn.polynomial_decay_lr)) == (
        "(learning_rate, end_learning_rate, total_step, step_per_epoch, decay_epoch, power, "
        "update_decay_epoch=False)")


@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.warmup_lr(1, 10, 2, 3), TypeError, "learning_rate"),
    (lambda: nn.cosine_decay_lr(0.1, 0.05, 10, 2, 3), ValueError, "max_lr"),
    (lambda: nn.piecewise_constant_lr([3, 2], [0.1, 0.2]), ValueError, "milestone"),
    (lambda: nn.exponential_decay_lr(0.1, 0.9, 0, 2, 3), ValueError, "total_step"),
    (lambda: nn.inverse_decay_lr(0.1, 0.9, 10, 2, 3, is_stair=1), TypeError, "is_stair"),
    (lambda: nn.LearningRateSchedule()(3), NotImplementedError, "construct"),
])
def test_bad_arguments_raise(make, error, message):
    with pytest.raises(error, match=message):
        make()


# The dynamic_lr builders' checks as MindSpore 2.10 writes them (mindspore/nn/dynamic_lr.py:
# piecewise_constant_lr 68-82, `_check_inputs` 90-98; `_checkparam.check_positive_int`: an int > 0,
# not a bool; `check_positive_float`: > 0; `check_is_float`: a float, not a bool): refused rows.
@pytest.mark.parametrize("make, error, message", [
    (lambda: nn.exponential_decay_lr(0.1, 0.9, True, 2, 3), TypeError, "total_step"),
    (lambda: nn.exponential_decay_lr(0.0, 0.9, 10, 2, 3), ValueError, "learning_rate"),
    (lambda: nn.exponential_decay_lr(0.1, 0.0, 10, 2, 3), ValueError, "decay_rate"),
    (lambda: nn.piecewise_constant_lr([2], [True]), TypeError, r"learning_rates\[0\]"),
    (lambda: nn.piecewise_constant_lr([2], [1]), TypeError, r"learning_rates\[0\]"),
    # cosine_decay_lr 327-335: max_lr > 0 (check_positive_float), then max_lr > min_lr strictly
    (lambda: nn.cosine_decay_lr(0.0, 0.0, 4, 1, 2), ValueError, r"max_lr must be in \(0, inf\)"),
    (lambda: nn.cosine_decay_lr(0.1, 0.1, 4, 1, 2), ValueError, "greater than min_lr"),
    # polynomial_decay_lr 409-416: learning_rate and power > 0 (check_positive_float)
    (lambda: nn.polynomial_decay_lr(0.0, 0.0, 2, 1, 2, 1.0), ValueError, "learning_rate"),
    (lambda: nn.polynomial_decay_lr(0.1, 0.0, 2, 1, 2, 0.0), ValueError, "power"),
])
def test_dynamic_lr_refuses_as_mindspore(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_dynamic_lr_accepts_as_mindspore():
    """The other side of each bound: a count of 1 (``check_positive_int``), and equal milestones
    (``piecewise_constant_lr`` raises only for ``item < last_item``, dynamic_lr.py 79: a segment of no
    steps)."""
    assert nn.exponential_decay_lr(0.1, 0.5, 1, 1, 1) == [0.1]
    assert nn.piecewise_constant_lr([2, 2, 4], [0.1, 0.2, 0.3]) == [0.1, 0.1, 0.3, 0.3]
    # min_lr 0.0 is taken (check_non_negative_float, 327): 0.05 * (1 + cos(pi * min(i, 2) / 2))
    assert nn.cosine_decay_lr(0.0, 0.1, 4, 1, 2) == pytest.approx([0.1, 0.05, 0.0, 0.0], abs=1e-15)
    # end_learning_rate 0.0 (check_non_negative_float, 414): 0.1 * (1 - i / 2) ** 1.0 + 0.0
    assert nn.polynomial_decay_lr(0.1, 0.0, 2, 1, 2, 1.0) == [0.1, 0.05]
    # warmup_lr's learning_rate 0.0 (check_non_negative_float, 481)
    assert nn.warmup_lr(0.0, 2, 1, 2) == [0.0, 0.0]


# Each class's bounds as MindSpore 2.10 checks them (mindspore/nn/learning_rate_schedule.py:
# `_check_inputs` lines 51-57, CosineDecayLR 338-344, PolynomialDecayLR 425-436, WarmUpLR 516-517;
# `_checkparam.check_positive_int` is `> 0` and int only, `check_positive_float` `> 0`,
# `check_non_negative_float` `>= 0`): the bound itself and one step past it, each outcome as
# MindSpore 2.10 gives it (all 18 re-run there by hand; 17 agree). The one exception, marked,
# is gradxform's float32 rule (gradxform/_ranges.py: a float is judged as the float32 it is
# stored as; 1e-46 is 0 there).
@pytest.mark.parametrize("kind, args, error, name", [
    ("ExponentialDecayLR", (0.1, 0.9, 1), None, None),            # decay_steps > 0: 1 is in
    ("NaturalExpDecayLR", (0.1, 0.9, 1), None, None),
    ("ExponentialDecayLR", (0.1, 0.9, 2.5), TypeError, "decay_steps"),   # an int only
    ("ExponentialDecayLR", (0.0, 0.9, 4), ValueError, "learning_rate"),  # learning_rate > 0
    ("ExponentialDecayLR", (0.1, 0.0, 4), ValueError, "decay_rate"),     # decay_rate > 0
    ("InverseDecayLR", (0.1, 0.0, 4), ValueError, "decay_rate"),
    ("CosineDecayLR", (0.0, 0.1, 1), None, None),                 # min_lr >= 0; decay_steps 1 is in
    ("CosineDecayLR", (0.0, 0.1, 0), ValueError, "decay_steps"),
    ("CosineDecayLR", (0.0, 0.1, 2.5), TypeError, "decay_steps"),
    ("CosineDecayLR", (0.1, 0.1, 10), ValueError, "max_lr"),       # `if min_lr >= max_lr`: equal is refused
    ("CosineDecayLR", (0.0, 1e-46, 10), ValueError, "max_lr"),     # gradxform: stored as float32 0 (MindSpore takes it)
    ("PolynomialDecayLR", (0.1, 0.0, 1, 0.5), None, None),       # end_learning_rate >= 0; decay_steps 1
    ("PolynomialDecayLR", (0.0, 0.0, 4, 0.5), ValueError, "learning_rate"),
    ("PolynomialDecayLR", (0.1, 0.0, 0, 0.5), ValueError, "decay_steps"),
    ("PolynomialDecayLR", (0.1, 0.0, 2.5, 0.5), TypeError, "decay_steps"),
    ("WarmUpLR", (0.0, 1), None, None),                          # learning_rate >= 0; warmup_steps 1
    ("WarmUpLR", (0.1, 2.5), TypeError, "warmup_steps"),
    ("WarmUpLR", (0.1, 0), ValueError, "warmup_steps"),
])
def test_constructor_bounds_as_mindspore_checks_them(kind, args, error, name):
    if error is None:
        getattr(nn, kind)(*args)
    else:
        with pytest.raises(error, match=name):
            getattr(nn, kind)(*args)


def test_the_closed_forms_are_read_per_update_and_a_subclass_rescales_by_its_own_base():
    """The six classes are closed forms: an optimizer asks ``lr_for_update(count)``, count 1 on
    the first update reading global_step 0 (the golden WarmUpLR(0.1, 8): 0.1 * min(s, 8) / 8).
    A user's subclass has none, and ``sched(step, base_lr)`` scales what its construct returns by
    ``base_lr / self.base_lr`` when it sets a base_lr, as the closed forms do; without one, or
    without a base_lr argument, the value is construct's own."""
    assert META["schedules"]["warmup"] == {"type": "WarmUpLR", "args": [0.1, 8]}
    np.testing.assert_allclose(G["sched_warmup"][:4], [0.0, 0.0125, 0.025, 0.0375], rtol=1e-6, atol=1e-9)

    class Halving(nn.LearningRateSchedule):
        def construct(self, global_step):
            return 0.4 * 0.5 ** global_step

    own, based = Halving(), Halving()
    assert own.base_lr is None
    based.base_lr = 0.4
    got = jax.jit(lambda: (nn.WarmUpLR(0.1, 8).lr_for_update(jnp.arange(1, 5)),  # one compile, not eight
                           own(2, 0.1), based(2), based(2, 0.1)))()
    np.testing.assert_allclose(got[0], G["sched_warmup"][:4], rtol=1e-6)
    np.testing.assert_allclose(got[1:], [0.1, 0.1, 0.025], rtol=1e-6)  # 0.1 * (0.1 / 0.4) last


# ---------------------------------------------------------------- a user's subclass
def test_bert_subclass_called_as_mindspore_calls_it():
    sched = BertLearningRate(**META["bert"])
    assert not hasattr(sched, "lr_for_update")  # a user's schedule, not a closed form
    got = [np.asarray(sched(s)) for s in range(40)]
    assert got[5].shape == (1,)  # what its construct returns, as in MindSpore
    np.testing.assert_allclose(np.concatenate(got), G["sched_bert"], rtol=1e-6, atol=1e-9)
    want = [ref_bert_lr(s, **META["bert"]) for s in range(40)]
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("key", sorted(META["runs"]))
def test_bert_subclass_drives_the_optimizer_in_own_jit_with_one_trace(key):
    """learning_rate=<subclass>: global_step read before its increment (0 on the first update),
    the (1,) output reshaped, as MindSpore's Optimizer.get_lr."""
    run = META["runs"][key]
    w0, grads, weights, lrs = run_data(key)
    ref_lrs = [ref_bert_lr(t, **META["bert"]) for t in range(STEPS)]
    np.testing.assert_allclose(lrs, ref_lrs, rtol=1e-6, atol=1e-9)
    tx = gx.create(f"mindspore.{run['optimizer']}", learning_rate=BertLearningRate(**META["bert"]), **run["kwargs"])
    params = {n: jnp.asarray(w) for n, w in zip(NAMES, w0)}
    state = tx.init(params)
    traces = []

    @jax.jit
    def step(p, s, g):
        traces.append(1)
        u, s = tx.update(g, s, p)
        return gx.apply_updates(p, u), s

    ref = ref_run(run["optimizer"], run["kwargs"], w0, grads, ref_lrs)
    for t in range(STEPS):
        params, state = step(params, state, {n: jnp.asarray(g) for n, g in zip(NAMES, grads[t])})
        for i, n in enumerate(NAMES):
            np.testing.assert_allclose(np.asarray(params[n]), weights[t][i], rtol=2e-6, atol=1e-7)
            np.testing.assert_allclose(np.asarray(params[n]), ref[t][i], rtol=2e-6, atol=5e-7)
    assert len(traces) == 1


def test_untraceable_subclass_is_refused_in_own_jit_naming_the_way_out():
    with pytest.raises(gx.schedules.HostScheduleError, match="Trainer"):
        gx.create("mindspore.momentum", learning_rate=PythonBertLearningRate(**META["bert"]), momentum=0.9)


def test_untraceable_subclass_runs_on_the_host_in_the_trainer():
    run = META["runs"]["bert_momentum"]
    w0, grads, weights, _ = run_data("bert_momentum")
    params = {n: jnp.asarray(w) for n, w in zip(NAMES, w0)}
    trainer = gx.Trainer(params, "mindspore.momentum",
                         dict(learning_rate=PythonBertLearningRate(**META["bert"]), **run["kwargs"]))
    for t in range(STEPS):
        trainer.update({n: jnp.asarray(g) for n, g in zip(NAMES, grads[t])}, batch_size=1)
        for i, n in enumerate(NAMES):
            np.testing.assert_allclose(np.asarray(trainer.params[n]), weights[t][i], rtol=2e-6, atol=1e-7)


def test_a_learning_rate_callable_of_shape_1_is_reshaped():
    def lr_fn(global_step):  # MindSpore-style: a (1,) tensor
        return jnp.array([0.1], jnp.float32) * 0.5 ** global_step

    tx = gx.create("mindspore.momentum", learning_rate=lr_fn, momentum=0.0)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    for t in range(3):
        u, state = tx.update({"w": jnp.ones(2)}, state, params)
        np.testing.assert_allclose(np.asarray(u["w"]), -0.1 * 0.5 ** t, rtol=1e-6)


def test_bert_subclass_as_a_groups_lr():
    """A group's 'lr' takes the same objects (MindSpore's _preprocess_single_lr per group)."""
    run = META["runs"]["bert_momentum"]
    w0, grads, weights, _ = run_data("bert_momentum")
    groups = [{"params": [n], "lr": BertLearningRate(**META["bert"])} for n in NAMES]
    tx = gx.create("mindspore.momentum", learning_rate=0.5, groups=groups, **run["kwargs"])
    params = {n: jnp.asarray(w) for n, w in zip(NAMES, w0)}
    state = tx.init(params)
    step = jax.jit(tx.update)
    for t in range(STEPS):
        u, state = step({n: jnp.asarray(g) for n, g in zip(NAMES, grads[t])}, state, params)
        params = gx.apply_updates(params, u)
        for i, n in enumerate(NAMES):
            np.testing.assert_allclose(np.asarray(params[n]), weights[t][i], rtol=2e-6, atol=1e-7)


def test_a_subclass_that_changes_its_own_attributes_is_not_traced():
    class Counting(nn.LearningRateSchedule):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def construct(self, global_step):
            self.calls = self.calls + 1  # state: a traced step would run this once, not per update
            return 0.1 * 0.9 ** global_step

    sched = Counting()
    with pytest.raises(gx.schedules.HostScheduleError, match="changes its own attributes"):
        gx.create("mindspore.momentum", learning_rate=sched, momentum=0.9)
    assert sched.calls == 0  # what the check's trace wrote is undone


def test_a_subclass_counts_global_step_under_any_keyword():
    """Given to an MXNet optimizer's lr_scheduler=, it still reads global_step (0 on the first update)."""
    sched = BertLearningRate(**META["bert"])
    tx = gx.create("sgd", lr_scheduler=sched)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    for k in range(6):
        u, state = tx.update({"w": jnp.ones(2)}, state, params)
        np.testing.assert_allclose(np.asarray(u["w"]), -float(G["sched_bert"][k]), rtol=1e-6, atol=1e-9)
