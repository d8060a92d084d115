"""gradxform.schedules against MindSpore 2.10.0 and Paddle 3.3.1 schedule goldens
(tests/goldens/*/schedules.npz, steps 0..40).

Tolerance: MindSpore computes in float32 like us: rtol 1e-6. Paddle computes
in float64 and hands float32 to the optimizer; our float32 closed forms agree
to rtol 5e-6 (largest seen 3.5e-6, OneCycleLR's cosine)."""
import inspect
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform import schedules as S
from gradxform.paddle import lr as LR
from gradxform.pieces import track_step
from gradxform.schedules import UserSchedule, mxnet_style, optax_style
from gradxform.schedules._user import wrap
from gradxform.schedules.internal import HostSchedule, as_schedule, check_number, holds_its_rate, take_host_schedule

HERE = os.path.join(os.path.dirname(__file__), "goldens")
MS = np.load(os.path.join(HERE, "mindspore", "schedules.npz"))
MS_META = json.loads(str(MS["meta"]))["entries"]
PD = np.load(os.path.join(HERE, "paddle", "schedules.npz"))
PD_META = json.loads(str(PD["meta"]))["entries"]
PD_SKIP = {"MultiplicativeDecay", "CosineAnnealingWarmRestarts"}  # no class of their own: test_schedule_goldens_extra.py


def _build(m, prefix=""):
    """The schedule a golden records; ``prefix="Paddle"`` for Paddle's (`gradxform.schedules.Paddle<type>`)."""
    kw = dict(m["kwargs"])
    if m["type"] == "LambdaDecay":
        kw["lr_lambda"] = lambda e: 0.95 ** e  # the generator's lambda, recorded as text in meta
    for k, v in list(kw.items()):
        if isinstance(v, dict) and "type" in v:
            kw[k] = _build(v, prefix)
    return getattr(S, prefix + m["type"])(**kw)


@pytest.mark.parametrize("key", sorted(k for k in MS_META if not k.startswith("dynamic_lr")))
def test_mindspore_schedule_golden(key):
    sched = _build(MS_META[key])
    got = np.asarray(jax.jit(sched)(jnp.asarray(MS["global_step"])))
    np.testing.assert_allclose(got, MS[key], rtol=1e-6, atol=0)


@pytest.mark.parametrize("key", sorted(k for k, m in PD_META.items()
                                       if m["type"] not in PD_SKIP and m["type"] != "ReduceOnPlateau"))
def test_paddle_schedule_golden(key):
    got = np.asarray(_build(PD_META[key], "Paddle")(jnp.arange(41)))
    np.testing.assert_allclose(got, PD[key], rtol=5e-6, atol=1e-9)


@pytest.mark.parametrize("key", ["ReduceOnPlateau_min_rel", "ReduceOnPlateau_max_rel", "ReduceOnPlateau_min_abs"])
def test_paddle_reduce_on_plateau_golden(key):
    """ReduceOnPlateau_min_abs hits an exact float64 tie (loss 0.84 vs best 0.85 with
    abs threshold 0.01) that float32 resolves the other way; up to that step it agrees."""
    rop = _build(PD_META[key], "Paddle")
    state, got = rop.init_state(), [rop.base_lr]
    update = jax.jit(rop.update_metric)
    for loss in PD["ReduceOnPlateau_losses"]:
        state = update(state, loss)
        got.append(float(state.last_lr))
    got, want = np.array(got), PD[key]
    if key.endswith("min_abs"):
        losses = PD["ReduceOnPlateau_losses"]
        k = int(np.argmax(~np.isclose(got, want, rtol=1e-6)))  # first disagreement
        assert k > 0 and losses[k - 1] == 0.84, (k, losses[k - 1])
        np.testing.assert_allclose(got[:k], want[:k], rtol=1e-6)
        assert np.float32(0.84) < np.float32(0.85) - np.float32(0.01) and not 0.84 < 0.85 - 0.01
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_schedules_are_vectorised_and_rescale_with_base():
    s = S.ExponentialDecayLR(0.1, 0.9, 4)
    t = jnp.arange(12).reshape(3, 4)
    assert s(t).shape == (3, 4)
    np.testing.assert_allclose(s(t, jnp.float32(0.1)), s(t), rtol=0)  # the reference base: factor exactly 1
    np.testing.assert_allclose(s(t, 0.2), 2 * np.asarray(s(t)), rtol=1e-6)


def test_dynamic_lr_list_holds_last_value():
    s = S.DynamicLR([0.3, 0.2, 0.1])
    np.testing.assert_allclose(s(jnp.arange(6)), [0.3, 0.2, 0.1, 0.1, 0.1, 0.1], rtol=1e-7)


class _Half(S.Schedule):
    """The smallest user schedule: ``value`` only, ``base_lr`` left at the class's (1.0)."""

    def value(self, step):
        return 0.5 + 0.0 * step


def test_the_schedule_protocol_by_hand():
    """`gradxform.schedules._common`'s docstring, case by case: ``SCALE`` multiplies by
    ``base_lr / self.base_lr`` (1.0 when the subclass sets none; a schedule whose own
    base_lr is 1.0 scales too); ``COMPLETED`` reads update ``count`` at ``count - 1``.
    The shapes of the test above throughout: few eager compiles."""
    steps = jnp.arange(6)
    np.testing.assert_array_equal(_Half()(steps, 0.25), [0.125] * 6)
    np.testing.assert_array_equal(S.Constant(1.0)(steps, 0.25), [0.25] * 6)
    np.testing.assert_array_equal(S.Constant(0.0)(steps, 0.25), [0.0] * 6)  # base 0: as it is
    s = S.DynamicLR([0.3, 0.2, 0.1])
    assert s.base_lr == np.float32(0.3)
    want = np.float32([0.3, 0.2, 0.1, 0.1, 0.1, 0.1])
    np.testing.assert_array_equal(s.lr_for_update(steps + 1), want)
    np.testing.assert_array_equal(S.DynamicLR(np.float32([[0.3, 0.2, 0.1]]))(steps), want)  # any shape: flattened
    with pytest.raises(ValueError, match="must not be empty"):
        S.DynamicLR([])


@pytest.mark.parametrize("value, integer, error", [(True, False, TypeError), ("0.1", False, TypeError),
                                                  (0.5, True, TypeError), (-1, True, ValueError)])
def test_check_number_refuses(value, integer, error):
    with pytest.raises(error, match="x"):
        check_number("Sched", "x", value, low=0, integer=integer)
    check_number("Sched", "x", 0, low=0, integer=integer)  # the bound itself is in: low_open=False


def test_on_completed_steps_with_track_step():
    """The i-th update (count i after track_step's bump) uses sched(i - 1)."""
    s = S.PaddleStepDecay(0.5, step_size=2, gamma=0.1)
    tx = track_step(0.5, schedule=S.on_completed_steps(s))
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    seen = []
    for _ in range(5):
        ctx = gradxform.StepContext()
        _, state = tx.update(params, state, gx_context=ctx)
        seen.append(float(ctx["lr"]["w"]))
    np.testing.assert_allclose(seen, [0.5, 0.5, 0.05, 0.05, 0.005], rtol=1e-6)


@pytest.mark.parametrize("make, match", [
    (lambda: S.ExponentialDecayLR(0.1, 0.9, 0), "decay_steps"),
    (lambda: S.ExponentialDecayLR(1, 0.9, 4), "learning_rate"),
    (lambda: S.CosineDecayLR(0.2, 0.1, 10), "max_lr"),
    (lambda: S.PolynomialDecayLR(0.1, 0.01, 4, power=0.0), "power"),
    (lambda: S.WarmUpLR(0.1, 0), "warmup_steps"),
    (lambda: S.PaddleStepDecay(0.1, step_size=0), "step_size"),
    (lambda: S.PaddlePiecewiseDecay([1, 2], [0.1]), "values"),
    (lambda: S.PaddleLinearWarmup(0.1, 5, start_lr=0.2, end_lr=0.1), "end_lr"),
    (lambda: S.PaddleOneCycleLR(0.1, 10, anneal_strategy="exp"), "anneal_strategy"),
    (lambda: S.PaddleCyclicLR(0.1, 0.5, 0), "step_size_up"),
    (lambda: S.PaddleReduceOnPlateau(0.1, mode="avg"), "mode"),
    (lambda: S.PaddleReduceOnPlateau(0.1, factor=1.5), "factor"),
])
def test_schedule_arguments_checked_at_construction(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_user_callables_are_adapted_and_a_stateful_object_is_left_as_it_was():
    import optax
    from gradxform.schedules._user import UserSchedule, untraceable_reason, wrap

    assert wrap(optax.constant_schedule(0.1), S.NUM_UPDATE).indexed_by == S.COMPLETED   # optax: from 0
    assert wrap(lambda n: 0.1, S.NUM_UPDATE).indexed_by == S.NUM_UPDATE
    assert isinstance(wrap(lambda n, base: base, S.NUM_UPDATE), S.FunctionSchedule)   # (step, base_lr)

    class Counting:
        def __init__(self):
            self.calls, self.base_lr = 0, 0.1

        def __call__(self, n):
            self.calls += 1          # state: no control flow, but not a pure function either
            return self.base_lr * n

    obj = Counting()
    assert "attributes" in untraceable_reason(UserSchedule(obj, indexed_by=S.NUM_UPDATE))
    assert obj.calls == 0 and obj.base_lr == 0.1      # the trace's writes were undone
    v = UserSchedule(lambda n: 0.5 * n, indexed_by=S.COMPLETED).lr_for_update(np.arange(1, 4))
    np.testing.assert_allclose(v, [0.0, 0.5, 1.0])     # vectorised (group learning rates)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_traceable_schedule_out_of_range_moves_nothing_under_jit(bad):
    # the host path refuses such a value; inside jit the rate is used as 0 (never gradient ascent)
    def schedule(num_update):
        return jnp.where(num_update == 2, jnp.float32(bad), jnp.float32(0.1))

    tx = gradxform.create("sgd", learning_rate=0.1, lr_scheduler=schedule)
    params = {"w": jnp.array([1.0, -1.0])}
    step = jax.jit(lambda p, s: (lambda u, s: (gradxform.apply_updates(p, u), s))(*tx.update({"w": jnp.ones(2)}, s, p)))
    state = tx.init(params)
    p1, state = step(params, state)
    np.testing.assert_allclose(np.asarray(p1["w"]), [0.9, -1.1], rtol=1e-6)
    p2, state = step(p1, state)
    np.testing.assert_array_equal(np.asarray(p2["w"]), np.asarray(p1["w"]))  # update 2: rate used as 0
    p3, _ = step(p2, state)
    np.testing.assert_allclose(np.asarray(p3["w"]), [0.8, -1.2], rtol=1e-6)


# -- gradxform.schedules._user by hand: each rule of its module docstring (issue 28 mutants) ----------
class _Halving:
    """An MXNet-protocol class JAX cannot trace (a Python `if` on num_update), with a base_lr."""

    def __init__(self):
        self.base_lr = 0.1

    def __call__(self, num_update):
        return self.base_lr * 0.5 ** num_update if num_update > 0 else self.base_lr


def test_user_callables_vectorise_scale_and_say_their_convention():
    # lax.cond takes a scalar predicate: a vector of steps (group learning rates) must be vmapped
    cond = UserSchedule(lambda t: jax.lax.cond(t < 2, lambda: 0.1, lambda: 0.01), indexed_by=S.COMPLETED)
    halves = UserSchedule(lambda t: 0.4 * 0.5 ** t, indexed_by=S.COMPLETED, base_lr=0.4)
    got = jax.jit(lambda: (cond.lr_for_update(jnp.arange(1, 5)), cond.lr_for_update(3),
                           halves(2, 0.2), halves(2)))()
    np.testing.assert_allclose(got[0], [0.1, 0.1, 0.01, 0.01], rtol=1e-6)
    assert got[1].shape == () and np.isclose(got[1], 0.01)
    np.testing.assert_allclose(got[2:], [0.05, 0.1], rtol=1e-6)  # 0.1 * (0.2 / 0.4); its own without a base
    assert repr(mxnet_style(abs)) == "mxnet_style(<built-in function abs>)"
    assert repr(optax_style(abs)) == "optax_style(<built-in function abs>)"
    # a signature inspect cannot read (`max`) is taken as one argument, not fn(step, base_lr)
    assert type(wrap(max, S.NUM_UPDATE)) is UserSchedule
    # fn(step, base_lr): under lr_scheduler= the base replaces (MXNet), under learning_rate= it scales
    assert wrap(lambda n, base: base, S.NUM_UPDATE).rebase == S.REPLACE
    assert wrap(lambda n, base: base, S.COMPLETED).rebase == S.SCALE


_PADDLE_PARTS = {"last_lr": 0.1, "last_epoch": 0, "step": lambda self: None, "__call__": lambda self: self.last_lr}


def _paddle_like(drop=None, **extra):
    """Paddle's LRScheduler protocol in miniature (`holds_its_rate`), less the part ``drop``."""
    return type("PaddleLike", (), {**{k: v for k, v in _PADDLE_PARTS.items() if k != drop}, **extra})()


@pytest.mark.parametrize("make, held", [
    (_paddle_like, True),
    (lambda: _paddle_like("step"), False),
    (lambda: _paddle_like("last_lr"), False),
    (lambda: _paddle_like("last_epoch"), False),
    (lambda: _paddle_like("__call__"), False),
    (lambda: _paddle_like(lr_for_update=lambda self, c: 0.1), False),  # a closed form is no held rate
])
def test_holds_its_rate_needs_every_part_of_paddles_protocol(make, held):
    assert holds_its_rate(make()) is held


def test_host_schedule_counts_its_updates_and_reads_a_skipped_one_from_the_state():
    host = HostSchedule(UserSchedule(_Halving(), indexed_by=S.NUM_UPDATE), "lr_scheduler")
    assert host.next_lr(lambda: 3) == 0.1 * 0.5 ** 4     # 3 done: the 4th update's rate
    host.commit()                                        # counted: done() is not asked again
    assert host.next_lr(lambda: 99) == 0.1 * 0.5 ** 5
    host.commit(counted=False)                           # a guard may have skipped it: ask the state
    assert host.next_lr(lambda: 4) == 0.1 * 0.5 ** 5
    held = HostSchedule(UserSchedule(lambda n: np.array([0.25]), indexed_by=S.COMPLETED), "learning_rate")
    assert held.lr_at(1) == 0.25                         # a (1,) value, as MindSpore's get_lr reshapes it


def test_take_host_schedule_builds_with_the_first_updates_rate():
    sched = _Halving()
    params, _ = take_host_schedule({"lr_scheduler": sched, "learning_rate": 0.4})
    assert sched.base_lr == 0.4                          # MXNet's Optimizer.__init__ writes it
    assert params == {"learning_rate": 0.4 * 0.5 ** 1}   # num_update 1 on the first update
    params, _ = take_host_schedule({"lr_scheduler": _Halving(), "begin_num_update": 5})
    assert params == {"learning_rate": 0.1 * 0.5 ** 6, "begin_num_update": 5}

    class CallableRate(float):                           # a number, even if callable: a value
        def __call__(self, n):
            return float(self) if n > 0 else 0.0

    class ShapedRate:                                    # anything with a shape: an array
        shape = ()

        def __call__(self, n):
            return 0.1 if n > 0 else 0.0

    for given in (CallableRate(0.1), ShapedRate(), "0.1"):  # the optimizer's own check refuses a string
        assert take_host_schedule({"learning_rate": given}) == ({"learning_rate": given}, None)


@pytest.mark.parametrize("given, error", [
    ([0.3, 0.0], None), ((0.3,), None), (np.float32([0.3, 0.2]), None),   # a list, a tuple, a 1-D array; 0 is in
    (np.float32(0.3), None),                                               # a 0-D array is a number
    (np.zeros((1, 2)), "0-D or 1-D"), ([], "must not be empty"),
    (["a"], "finite number"), ([0.3, float("nan")], "finite number"), ([0.3, -0.1], "finite number"),
])
def test_a_learning_rate_list_becomes_a_dynamic_lr_and_is_checked(given, error):
    """`_user.as_schedule`, MindSpore's ``learning_rate=`` rules (mindspore/nn/optim/optimizer.py
    `_preprocess_single_lr`: a number, a list or 1-D Tensor of rates, or a schedule)."""
    if error:
        with pytest.raises(ValueError, match=r"Opt\(learning_rate=...\): .*" + error):
            as_schedule("Opt", given, S.DynamicLR)
        return
    base, sched = as_schedule("Opt", given, S.DynamicLR)
    assert base == np.float32(0.3)
    flat = np.ravel(given)
    if np.ndim(given) == 0:
        assert sched is None
    else:
        assert isinstance(sched, S.DynamicLR) and np.array_equal(sched.values, np.float32(flat))


def test_a_callable_without_a_base_takes_its_first_updates_rate_as_base():
    base, sched = as_schedule("Opt", lambda t: 0.5 ** t, S.DynamicLR)  # optax's count: 0 on the first update
    assert base == 1.0 and sched.base_lr == 1.0                        # so set_hyper(learning_rate=x) scales by x
    base, sched = as_schedule("Opt", lambda t: 0.0 * t, S.DynamicLR)   # a first rate of 0: no rescaling
    assert base == 0.0 and not sched.base_lr
    assert as_schedule("Opt", 0.0, S.DynamicLR) == (0.0, None)        # a number: learning_rate >= 0
    with pytest.raises(ValueError, match="learning_rate"):
        as_schedule("Opt", -0.1, S.DynamicLR)


def test_a_schedule_subclass_without_a_base_takes_its_first_rate():
    """It failed at the optimizer's init ("None is not a valid value for jnp.array") before
    `_user` mutant #75 showed it: the first update's rate stands for its base."""

    class NoBase(S.Schedule):   # a Schedule subclass that sets base_lr = None: failed at init before
        base_lr = None

        def value(self, step):
            return 0.2 * 0.5 ** step

    base, sched = as_schedule("Opt", NoBase(), S.DynamicLR)
    assert base == np.float32(0.2) and sched.base_lr == base
    np.testing.assert_allclose(jax.jit(sched.lr_for_update)(3, 0.4), 0.1, rtol=1e-6)  # 0.05 * (0.4 / 0.2)


# Paddle's schedule classes (gradxform/schedules/_paddle.py): each bound itself and one step past
# it, as paddle/optimizer/lr.py (3.3.1) checks them: StepDecay 1322-1329, MultiStepDecay 1200-1211,
# ExponentialDecay's and PolynomialDecay's asserts, CosineAnnealingDecay's T_max, LinearWarmup
# 956-970, NoamDecay 386, OneCycleLR 2022-2046, CyclicLR's step sizes, LinearLR 2446-2459. All 39
# outcomes were run in Paddle 3.3.1 by hand; three differ there, by gradxform's own rules: a bool
# is not a learning rate (Paddle takes True as 1), NoamDecay's warmup_steps=0 is refused here
# (Paddle: ZeroDivisionError at the first get_lr), LinearLR's total_steps must be an int (Paddle's
# annotation; it does not check).
@pytest.mark.parametrize("make, error", [
    (lambda: S.PaddleStepDecay(0.1, 1), None), (lambda: S.PaddleStepDecay(0.1, 0), "step_size"),
    (lambda: S.PaddleStepDecay(0.1, 2.5), "step_size"),
    (lambda: S.PaddleStepDecay(0.1, 2, gamma=1.0), "gamma"),
    (lambda: S.PaddleMultiStepDecay(0.1, [3, 2, 5]), "milestones"),
    (lambda: S.PaddleMultiStepDecay(0.1, [3, 3]), "milestones"),
    (lambda: S.PaddleMultiStepDecay(0.1, [3, 2]), "milestones"),
    (lambda: S.PaddleMultiStepDecay(0.1, [2], gamma=1.0), "gamma"),
    (lambda: S.PaddleExponentialDecay(0.1, 0.0), "gamma"), (lambda: S.PaddleExponentialDecay(0.1, 1.0), "gamma"),
    (lambda: S.PaddlePolynomialDecay(0.1, 1, power=0.5), None),
    (lambda: S.PaddlePolynomialDecay(0.1, 0), "decay_steps"),
    (lambda: S.PaddlePolynomialDecay(0.1, 2.5), "decay_steps"),
    (lambda: S.PaddlePolynomialDecay(0.1, 4, power=0.0), "power"),
    (lambda: S.PaddleCosineAnnealingDecay(0.1, 1), None), (lambda: S.PaddleCosineAnnealingDecay(0.1, 0), "T_max"),
    (lambda: S.PaddleCosineAnnealingDecay(0.1, 2.5), "T_max"),
    (lambda: S.PaddleLinearWarmup(0.1, 1, 0.0, 0.1), None),
    (lambda: S.PaddleLinearWarmup(0.1, 0, 0.0, 0.1), "warmup_steps"),
    (lambda: S.PaddleLinearWarmup(0.1, 2.5, 0.0, 0.1), "warmup_steps"),
    (lambda: S.PaddleLinearWarmup(0.1, 5, 0.1, 0.1), "end_lr"),
    (lambda: S.PaddleLinearWarmup("0.1", 5, 0.0, 0.1), "learning_rate"),
    (lambda: S.PaddleLinearWarmup(True, 5, 0.0, 0.1), "learning_rate"),
    (lambda: S.PaddleNoamDecay(1, 1), None),
    (lambda: S.PaddleNoamDecay(0, 10), "d_model"),
    (lambda: S.PaddleNoamDecay(64, 0), "warmup_steps"),
    (lambda: S.PaddleOneCycleLR(0.1, 1, phase_pct=0.5), None), (lambda: S.PaddleOneCycleLR(0.1, 0), "total_steps"),
    (lambda: S.PaddleOneCycleLR(0.1, 2.5), "total_steps"),
    (lambda: S.PaddleOneCycleLR(0.1, 10, phase_pct=1.01), "phase_pct"),
    (lambda: S.PaddleOneCycleLR(0.1, 10, phase_pct=0.5, three_phase=True), "phase_pct"),
    (lambda: S.PaddleCyclicLR(0.1, 0.5, 1, 1), None), (lambda: S.PaddleCyclicLR(0.1, 0.5, 5, 0), "step_size_down"),
    (lambda: S.PaddleLinearLR(0.1, 1, start_factor=1.0, end_factor=0.0), None),
    (lambda: S.PaddleLinearLR(0.1, 0), "total_steps"),
    (lambda: S.PaddleLinearLR(0.1, 2.5), "total_steps"),
    (lambda: S.PaddleLinearLR(0.1, 5, start_factor=0.0), "start_factor"),
    (lambda: S.PaddleLinearLR(0.1, 5, start_factor=1.5), "start_factor"),
    (lambda: S.PaddleLinearLR(0.1, 5, end_factor=1.5), "end_factor"),
])
def test_paddle_schedule_bounds(make, error):
    if error is None:
        make()
    else:
        with pytest.raises((TypeError, ValueError), match=error):
            make()


def test_paddle_schedule_defaults_and_base_are_paddles():
    """Every default of a Paddle schedule class (``Paddle<Name>``) is that of `gradxform.paddle.lr`'s
    ``<Name>``, whose signatures `test_paddle_lr.test_surface_is_paddles` pins to Paddle 3.3.1;
    PaddlePiecewiseDecay's base (the value `set_hyper(learning_rate=...)` rescales from) is values[0]."""
    for name in ("StepDecay", "MultiStepDecay", "PolynomialDecay", "CosineAnnealingDecay", "NoamDecay",
                 "OneCycleLR", "CyclicLR", "LinearLR"):
        theirs = inspect.signature(getattr(LR, name)).parameters
        for k, p in inspect.signature(getattr(S, "Paddle" + name)).parameters.items():
            assert p.default == theirs[k].default, (name, k)
    assert S.PaddlePiecewiseDecay([2, 4], [0.3, 0.2, 0.1]).base_lr == 0.3
