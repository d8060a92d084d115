"""MXNet's ``lr_scheduler`` objects as MXNet 1.9.1 runs them (tests/goldens/mxnet/objects/lr_scheduler.npz,
tools/mxnet_lr_goldens.py): the five classes with linear and constant warmup over num_update
1..40, ``get_warmup_lr``, and a user's subclass written to MXNet's protocol
(``__call__(self, num_update)``) driving ``mx.optimizer.SGD(momentum=0.9)`` through
``get_updater``, both where JAX can trace it (own jit, one trace) and where it cannot (Python
``if``/``while`` and state: evaluated on the host).

Each value is also checked against a float64 transcription of mxnet/lr_scheduler.py and of
``sgd_mom_update`` written below (never calling gradxform). Tolerances: the schedulers compute
in float32 here and float64 in MXNet: rtol 1e-6; ``get_warmup_lr`` on a Python int is Python
arithmetic as in MXNet: 1e-15; weights after 12 float32 updates: rtol 2e-6, atol 1e-7.
"""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform.lr_scheduler import LRScheduler
from goldens_io import GOLDENS
import mxnet_schedules_reference as mxs

with np.load(GOLDENS / "mxnet" / "objects" / "lr_scheduler.npz") as _z:
    G = {k: _z[k] for k in _z.files}
META = json.loads(str(G["meta"]))
SCHEDS = META["schedulers"]
STEPS = META["steps"]


# ---------------------------------------------------------------- float64 transcription of MXNet 1.9.1
# the schedulers: tests/mxnet_schedules_reference.py (shared with tests/test_mxnet_reference.py)
REF = {name: getattr(mxs, name) for name in ("FactorScheduler", "MultiFactorScheduler", "PolyScheduler",
                                             "CosineScheduler")}


def ref_sgd_momentum(w0, grads, lrs, momentum, wd):
    """mxnet sgd_mom_update in float64: mom = momentum*mom - lr*(grad + wd*w); w += mom."""
    w = [np.float64(x) for x in w0]
    mom = [np.zeros_like(x) for x in w]
    out = []
    for t, gs in enumerate(grads):
        for i, g in enumerate(gs):
            mom[i] = momentum * mom[i] - lrs[t] * (np.float64(g) + wd * w[i])
            w[i] = w[i] + mom[i]
        out.append([x.copy() for x in w])
    return out


# ---------------------------------------------------------------- user subclasses (MXNet's protocol)
class StepWarmup(LRScheduler):
    """As tools/mxnet_lr_goldens.py: Python if/while on num_update and state it changes."""

    def __init__(self, step, factor, base_lr=0.1, warmup_steps=4, warmup_begin_lr=0.02, warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.step, self.factor, self.count = step, factor, warmup_steps

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr *= self.factor
        return self.base_lr


class SmoothDecay(LRScheduler):
    """Arithmetic only: JAX traces it."""

    def __init__(self, horizon, base_lr=0.1):
        super().__init__(base_lr)
        self.horizon = horizon

    def __call__(self, num_update):
        return self.base_lr * (1.0 - num_update / self.horizon) ** 2 + 0.001


def run_data(key):
    n = len(META["shapes"])
    w0 = [G[f"{key}_w0_{i}"] for i in range(n)]
    grads = [[G[f"{key}_g_{t}_{i}"] for i in range(n)] for t in range(STEPS)]
    weights = [[G[f"{key}_w_{t}_{i}"] for i in range(n)] for t in range(STEPS)]
    lrs = [float(G[f"{key}_lr_{t}"]) for t in range(STEPS)]
    return w0, grads, weights, lrs


# ---------------------------------------------------------------- the classes
@pytest.mark.parametrize("key", sorted(SCHEDS))
def test_scheduler_values_match_mxnet_and_float64(key):
    spec = SCHEDS[key]
    ref = REF[spec["type"]](**spec["kwargs"])
    want = np.array([ref(n) for n in META["num_update"]])
    np.testing.assert_allclose(want, G[f"sched_{key}"], rtol=1e-12, atol=0)  # the transcription is MXNet's
    sched = getattr(gx.lr_scheduler, spec["type"])(**spec["kwargs"])
    got = np.asarray(jax.jit(sched)(jnp.asarray(META["num_update"])))
    np.testing.assert_allclose(got, G[f"sched_{key}"], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("key", sorted(SCHEDS))
def test_get_warmup_lr_matches_mxnet(key):
    spec = SCHEDS[key]
    sched = getattr(gx.lr_scheduler, spec["type"])(**spec["kwargs"])
    ref = REF[spec["type"]](**spec["kwargs"])
    steps = range(spec["kwargs"]["warmup_steps"])
    host = [sched.get_warmup_lr(n) for n in steps]
    assert all(isinstance(v, (int, float)) for v in host)  # Python numbers, as MXNet's
    np.testing.assert_allclose(host, G[f"warmup_{key}"], rtol=1e-15, atol=0)
    np.testing.assert_allclose(host, [ref.get_warmup_lr(n) for n in steps], rtol=1e-15, atol=0)
    traced = np.asarray(jax.jit(sched.get_warmup_lr)(jnp.arange(len(steps))))
    np.testing.assert_allclose(traced, G[f"warmup_{key}"], rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="warmup_steps"):
        sched.get_warmup_lr(spec["kwargs"]["warmup_steps"])


def test_the_classes_keep_their_closed_form():
    s = gx.lr_scheduler.FactorScheduler(step=3, factor=0.5, base_lr=0.1)
    assert callable(s.lr_for_update)
    assert float(s.lr_for_update(7, 0.2)) == pytest.approx(0.05)


# the constructors' bounds, as mxnet/lr_scheduler.py (1.9.1) checks them: the bound itself is accepted
_LRS = gx.lr_scheduler
ACCEPTED = [
    lambda: _LRS.LRScheduler(base_lr=0.1, warmup_steps=0, warmup_begin_lr=0.1),  # `begin > final` raises
    lambda: _LRS.FactorScheduler(step=1, factor=1.0),                              # `step < 1`, `factor > 1.0`
    lambda: _LRS.MultiFactorScheduler(step=[1, 2], factor=1.0),                    # `_step < 1`, `<= step[i-1]`
    lambda: _LRS.MultiFactorScheduler(step=[3]),                                   # `len(step) >= 1`
    lambda: _LRS.PolyScheduler(max_update=1),                                      # `max_update < 1`
    lambda: _LRS.CosineScheduler(max_update=1),
]
REFUSED = [
    lambda: _LRS.LRScheduler(base_lr=0.1, warmup_begin_lr=0.1000001),
    lambda: _LRS.LRScheduler(warmup_steps=-1),
    lambda: _LRS.FactorScheduler(step=0),
    lambda: _LRS.FactorScheduler(step=1, factor=1.0000001),
    lambda: _LRS.MultiFactorScheduler(step=[]),      # MXNet: an assert (AssertionError)
    lambda: _LRS.MultiFactorScheduler(step=5),       # the same
    lambda: _LRS.MultiFactorScheduler(step=[0, 2]),
    lambda: _LRS.MultiFactorScheduler(step=[2, 2]),
    lambda: _LRS.MultiFactorScheduler(step=[1], factor=1.0000001),
    lambda: _LRS.PolyScheduler(max_update=0),
    lambda: _LRS.PolyScheduler(max_update=2.0),      # MXNet: assert isinstance(max_update, int)
    lambda: _LRS.CosineScheduler(max_update=2.0),
    lambda: _LRS.CosineScheduler(max_update=0),
]


@pytest.mark.parametrize("make", ACCEPTED)
def test_constructor_bounds_accepted_as_mxnet(make):
    make()


@pytest.mark.parametrize("make", REFUSED)
def test_constructor_bounds_refused_as_mxnet(make):
    with pytest.raises(ValueError):
        make()


@pytest.mark.parametrize("name", sorted(REF))
def test_one_warmup_step_and_num_update_zero(name):
    """``warmup_steps=1``: MXNet's ``__call__(0)`` is the warmup's start (the recorded goldens
    begin at num_update 1); then the schedule, against the float64 transcription."""
    kw = dict(base_lr=0.1, warmup_steps=1, warmup_begin_lr=0.02)
    kw.update({"FactorScheduler": dict(step=2, factor=0.5), "MultiFactorScheduler": dict(step=[2, 3], factor=0.5)}
              .get(name, dict(max_update=4)))
    ref = REF[name](**kw)
    want = [ref(n) for n in range(5)]
    got = jax.jit(getattr(gx.lr_scheduler, name)(**kw))(jnp.arange(5))
    assert want[0] == 0.02
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    if name == "CosineScheduler":  # a decay of one update: max_update - warmup_steps = 1
        kw["max_update"] = 2
        ref = REF[name](**kw)  # one object called in order, as an optimizer calls it (it keeps state)
        want, got = [ref(n) for n in range(4)], jax.jit(gx.lr_scheduler.CosineScheduler(**kw))(jnp.arange(4))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-9)


def test_factor_scheduler_below_its_stop_lr():
    """A base_lr under stop_factor_lr: MXNet returns it until the first decay, then stop_factor_lr
    (its ``while`` clamps only what it has decayed)."""
    kw = dict(step=2, factor=0.5, stop_factor_lr=1e-8, base_lr=1e-9)
    ref = REF["FactorScheduler"](**kw)
    want = [ref(n) for n in range(1, 6)]
    assert want == [1e-9, 1e-9, 1e-8, 1e-8, 1e-8]
    np.testing.assert_allclose(np.asarray(jax.jit(gx.lr_scheduler.FactorScheduler(**kw))(jnp.arange(1, 6))),
                               want, rtol=1e-6)


# ---------------------------------------------------------------- a user's subclass
def test_user_subclass_has_no_closed_form_and_keeps_mxnet_attributes():
    s = StepWarmup(3, 0.5)
    assert isinstance(s, LRScheduler) and not hasattr(s, "lr_for_update")
    assert (s.base_lr, s.warmup_steps, s.warmup_begin_lr, s.warmup_mode) == (0.1, 4, 0.02, "linear")
    assert s(2) == pytest.approx(0.02 + 0.08 * 2 / 4)


def test_untraceable_subclass_through_get_updater_matches_mxnet():
    """Host path: MXNet's num_update (1 on the first update), its base_lr overwritten by learning_rate."""
    w0, grads, weights, lrs = run_data("stepwarmup")
    run = META["runs"]["stepwarmup"]
    sched = StepWarmup(**run["scheduler_kwargs"])
    upd = gx.mxnet.get_updater("sgd", dict(lr_scheduler=sched, **run["optimizer_kwargs"]))
    assert sched.base_lr == run["optimizer_kwargs"]["learning_rate"]  # as MXNet's Optimizer.__init__
    ref_sched = StepWarmup(**run["scheduler_kwargs"])
    ref_sched.base_lr = run["optimizer_kwargs"]["learning_rate"]
    ref_lrs = [ref_sched(n) for n in range(1, STEPS + 1)]
    np.testing.assert_allclose(ref_lrs, lrs, rtol=1e-15)
    ref = ref_sgd_momentum(w0, grads, ref_lrs, run["optimizer_kwargs"]["momentum"], run["optimizer_kwargs"]["wd"])
    w = [jnp.asarray(x) for x in w0]
    for t in range(STEPS):
        for i in range(len(w)):
            w[i] = upd(i, jnp.asarray(grads[t][i]), w[i])
        for i in range(len(w)):
            np.testing.assert_allclose(np.asarray(w[i]), weights[t][i], rtol=2e-6, atol=1e-7)
            np.testing.assert_allclose(np.asarray(w[i]), ref[t][i], rtol=2e-6, atol=1e-7)


def test_untraceable_subclass_in_own_jit_is_refused_naming_the_way_out():
    with pytest.raises(gx.schedules.HostScheduleError, match="get_updater"):
        gx.create("sgd", lr_scheduler=StepWarmup(3, 0.5), momentum=0.9)


def test_traceable_subclass_in_own_jit_matches_mxnet_with_one_trace():
    w0, grads, weights, lrs = run_data("smooth")
    run = META["runs"]["smooth"]
    sched = SmoothDecay(**run["scheduler_kwargs"])
    ref_lrs = [sched.base_lr * (1.0 - n / sched.horizon) ** 2 + 0.001 for n in range(1, STEPS + 1)]
    np.testing.assert_allclose(ref_lrs, lrs, rtol=1e-15)
    tx = gx.create("sgd", lr_scheduler=sched, **run["optimizer_kwargs"])
    params = {str(i): jnp.asarray(x) for i, x in enumerate(w0)}
    state = tx.init(params)
    traces = []

    @jax.jit
    def step(p, s, g):
        traces.append(1)
        u, s = tx.update(g, s, p)
        return gx.apply_updates(p, u), s

    ref = ref_sgd_momentum(w0, grads, ref_lrs, run["optimizer_kwargs"]["momentum"], 0.0)
    for t in range(STEPS):
        params, state = step(params, state, {str(i): jnp.asarray(g) for i, g in enumerate(grads[t])})
        for i in range(len(w0)):
            np.testing.assert_allclose(np.asarray(params[str(i)]), weights[t][i], rtol=2e-6, atol=1e-7)
            np.testing.assert_allclose(np.asarray(params[str(i)]), ref[t][i], rtol=2e-6, atol=1e-7)
    assert len(traces) == 1


def test_a_subclass_counts_num_update_under_any_keyword():
    """The class carries MXNet's count (1 on the first update) wherever it is given."""
    sched = SmoothDecay(30, base_lr=0.1)
    tx = gx.create("mindspore.momentum", learning_rate=sched, momentum=0.0)
    params = {"w": jnp.ones(2)}
    state = tx.init(params)
    for n in range(1, 4):
        u, state = tx.update({"w": jnp.ones(2)}, state, params)
        np.testing.assert_allclose(np.asarray(u["w"]), -(0.1 * (1.0 - n / 30) ** 2 + 0.001), rtol=1e-6)
