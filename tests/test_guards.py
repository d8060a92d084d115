"""skip_nonfinite, dynamic_loss_scale, check_guard: faults injected for real.

Tolerances: skipped steps are compared bit-exactly (nothing may move); loss
scale trajectories are exact (powers of two); an applied step under a loss
scale of 2**k equals the unscaled step bit-exactly (dividing by a power of two
is exact in float32 away from underflow).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform.pieces._step import StepState
from gradxform.pieces import all_finite, dynamic_loss_scale, skip_nonfinite
from gradxform.pieces._guards import LossScaleState, SkipNonfiniteState, step_is_finite

PARAMS = {"w": jnp.asarray([[0.5, -1.0], [2.0, 0.25]], jnp.float32), "b": jnp.asarray([0.1, -0.2], jnp.float32)}


def grads(k):
    return jax.tree.map(lambda p: jnp.cos(p + 0.1 * k), PARAMS)


def poisoned(k, value, leaf="w"):
    g = grads(k)
    g[leaf] = g[leaf].at[0, 0].set(value) if g[leaf].ndim == 2 else g[leaf].at[0].set(value)
    return g


def assert_same(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


def make_step(tx):
    @jax.jit
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return gx.apply_updates(p, u), s, u
    return step


# -- skip_nonfinite ---------------------------------------------------------------

ADAM = gx.create("adam", learning_rate=0.1, wd=1e-3, skip_nonfinite=True)
ADAM_STEP = make_step(ADAM)


@pytest.mark.parametrize("bad_step,value", [(3, jnp.nan), (5, jnp.inf), (1, -jnp.inf)])
def test_skip_nonfinite_at_a_chosen_step_is_as_if_the_step_never_happened(bad_step, value):
    p, s = PARAMS, ADAM.init(PARAMS)
    q, t = PARAMS, ADAM.init(PARAMS)       # the same run without the bad batch
    k_clean = 0
    for k in range(8):
        if k == bad_step:
            before = (p, s)
            p, s, u = ADAM_STEP(p, s, poisoned(k, value, leaf="b"))
            assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
            assert_same(p, before[0])
            assert_same(s.inner, before[1].inner)               # step counter and moments too
            continue
        p, s, _ = ADAM_STEP(p, s, grads(k))
        q, t, _ = ADAM_STEP(q, t, grads(k))
        k_clean += 1
    assert_same(p, q)
    assert_same(s.inner, t.inner)
    status = gx.guard_status(s)
    assert status == [{"kind": "skip_nonfinite", "skipped": 1, "consecutive": 0, "max_consecutive": 100,
                       "tripped": False}]
    gx.check_guard(s)  # does not raise


def test_guard_does_not_change_a_finite_step():
    # the guarded step runs inside lax.cond, compiled apart from the plain step: the
    # same arithmetic up to FMA contraction, so within 2 float32 ulp (measured: 1)
    plain = gx.create("adam", learning_rate=0.1, wd=1e-3)
    s, t = ADAM.init(PARAMS), plain.init(PARAMS)
    for k in range(3):
        u, s = ADAM.update(grads(k), s, PARAMS)
        v, t = plain.update(grads(k), t, PARAMS)
        jax.tree.map(lambda a, b: np.testing.assert_array_max_ulp(np.asarray(a), np.asarray(b), maxulp=2), u, v)
    jax.tree.map(lambda a, b: np.testing.assert_array_max_ulp(np.asarray(a), np.asarray(b), maxulp=2)
                 if np.issubdtype(np.asarray(a).dtype, np.floating) else np.testing.assert_array_equal(a, b),
                 s.inner, t)


def test_step_counter_is_not_bumped_by_a_skipped_step():
    p, s = PARAMS, ADAM.init(PARAMS)
    p, s, _ = ADAM_STEP(p, s, grads(0))
    p, s, _ = ADAM_STEP(p, s, poisoned(1, jnp.nan))
    steps = [n for n in jax.tree.leaves(s.inner, is_leaf=lambda n: isinstance(n, StepState))
             if isinstance(n, StepState)]
    counts = [c for st in steps for c in ([] if st.leaf_counts is None else np.asarray(st.leaf_counts))] + [st.count for st in steps]
    assert counts and all(np.all(np.asarray(c) == 1) for c in counts)


def test_guard_trips_after_max_consecutive_and_check_guard_raises():
    tx = skip_nonfinite(gx.create("sgd", learning_rate=0.1, momentum=0.9), max_consecutive=3)
    step = make_step(tx)
    p, s = PARAMS, tx.init(PARAMS)
    for k in range(2):
        p, s, _ = step(p, s, poisoned(k, jnp.nan))
        gx.check_guard(s)
    p, s, _ = step(p, s, poisoned(2, jnp.inf))
    with pytest.raises(gx.NonFiniteError, match="3 consecutive steps had NaN or Inf gradients"):
        gx.check_guard(s)
    # sticky: a clean step resets the run of bad steps but not the trip, so a
    # caller that checks only every N steps still sees it
    p, s, _ = step(p, s, grads(3))
    assert gx.guard_status(s)[0]["consecutive"] == 0
    with pytest.raises(gx.NonFiniteError):
        gx.check_guard(s)
    assert issubclass(gx.NonFiniteError, FloatingPointError)


def test_no_limit_never_trips_and_state_without_guard_passes():
    tx = skip_nonfinite(gx.create("sgd"), max_consecutive=None)
    step = make_step(tx)
    p, s = PARAMS, tx.init(PARAMS)
    for k in range(5):
        p, s, _ = step(p, s, poisoned(k, jnp.nan))
    gx.check_guard(s)
    assert gx.guard_status(s)[0]["skipped"] == 5 and gx.guard_status(s)[0]["max_consecutive"] is None
    gx.check_guard(gx.create("sgd").init(PARAMS))
    assert gx.guard_status(gx.create("sgd").init(PARAMS)) == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_max_consecutive_is_checked(bad):
    with pytest.raises(ValueError, match=r"skip_nonfinite\(max_consecutive=...\)"):
        skip_nonfinite(gx.create("sgd"), max_consecutive=bad)


def _explode():
    """A piece that turns a finite gradient into an Inf update (an overflow inside a rule)."""
    def init(params):
        return ()

    def update(u, s, params=None, **kw):
        return jax.tree.map(lambda x: x / jnp.zeros_like(x), u), s
    return gx.GradientTransformation(init, update)


def test_check_updates_catches_an_overflow_inside_the_rule():
    g = grads(0)
    u, s = skip_nonfinite(_explode()).update(g, skip_nonfinite(_explode()).init(PARAMS), PARAMS)
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u)) and int(s.guard.skipped) == 1
    tx = skip_nonfinite(_explode(), check_updates=False)
    u, s = tx.update(g, tx.init(PARAMS), PARAMS)
    assert not bool(all_finite(u)) and int(s.guard.skipped) == 0


def test_a_finite_gradient_that_overflows_the_state_is_skipped():
    """g = 1e38 is finite and so is Adam's update, but nu = g * g is +Inf:
    the step is skipped like a NaN gradient, parameters and state unchanged."""
    p, s = PARAMS, ADAM.init(PARAMS)
    p, s, _ = ADAM_STEP(p, s, grads(0))
    p2, s2, u = ADAM_STEP(p, s, poisoned(1, 1e38))
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
    assert_same(p2, p)
    assert_same(s2.inner, s.inner)
    assert gx.guard_status(s2)[0]["skipped"] == 1 and gx.guard_status(s2)[0]["consecutive"] == 1
    p3, s3, _ = ADAM_STEP(p2, s2, grads(2))                       # the next clean step applies
    assert gx.guard_status(s3)[0]["consecutive"] == 0 and bool(all_finite(p3, s3))
    # what the state check catches: without it the update is finite and nu keeps an Inf
    tx = skip_nonfinite(gx.create("adam", learning_rate=0.1, wd=1e-3), check_state=False)
    u, t = tx.update(poisoned(1, 1e38), tx.update(grads(0), tx.init(PARAMS), PARAMS)[1], PARAMS)
    assert bool(all_finite(u)) and not bool(all_finite(t.inner)) and int(t.guard.skipped) == 0


def test_master_weights_are_state_and_are_checked():
    """bfloat16 parameters with float32 masters: a master that overflows is
    caught by the state check alone (the updates are not checked here)."""
    params = {"w": jnp.asarray([0.5, -1.0], jnp.bfloat16)}
    tx = skip_nonfinite(gx.create("sgd", learning_rate=1.0, multi_precision=True), check_updates=False)
    g = {"w": jnp.asarray([-3e38, 1.0], jnp.bfloat16)}
    u, s = tx.update(g, tx.init(params), params)
    params = gx.apply_updates(params, u)
    assert bool(all_finite(params, s)) and int(s.guard.skipped) == 0
    u, s2 = tx.update(g, s, params)                                # master 3e38 + 3e38 = +Inf
    assert int(s2.guard.skipped) == 1 and all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
    assert_same(s2.inner, s.inner)


def test_loss_scale_skips_and_backs_off_on_an_overflow_of_updates_or_state():
    """dynamic_loss_scale applies the check of skip_nonfinite: gradients,
    updates and new state; each bad step is skipped and halves the scale."""
    inner = gx.create("adam", learning_rate=0.1)
    tx = dynamic_loss_scale(inner, init_scale=1.0)
    _, s = tx.update(grads(0), tx.init(PARAMS), PARAMS)
    u, s2 = tx.update(poisoned(1, 1e38), s, PARAMS)               # finite, but nu overflows
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
    assert_same(s2.inner, s.inner)
    assert float(gx.get_loss_scale(s2)) == 0.5 and gx.guard_status(s2)[0]["skipped"] == 1
    tx = dynamic_loss_scale(_explode(), init_scale=4.0)            # finite gradients, Inf updates
    u, s = tx.update(grads(0), tx.init(PARAMS), PARAMS)
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
    assert float(gx.get_loss_scale(s)) == 2.0 and gx.guard_status(s)[0]["skipped"] == 1


def test_guard_keeps_hyperparameters_reachable_and_one_trace():
    s = ADAM.init(PARAMS)
    assert {"learning_rate", "beta1", "beta2", "wd"} <= set(gx.hyper_names(s))
    s = gx.set_learning_rate(s, 0.05)
    assert float(gx.get_learning_rate(s)) == pytest.approx(0.05)
    traces = []
    step = jax.jit(lambda p, s, g: (traces.append(1), ADAM.update(g, s, p))[1])
    for k, g in enumerate([grads(0), poisoned(1, jnp.nan), grads(2)]):
        s = gx.set_hyper(s, beta1=0.8 + 0.01 * k)
        _, s = step(PARAMS, s, g)
    assert len(traces) == 1


def test_vmap_skips_only_the_bad_problem():
    batch = jax.tree.map(lambda p: jnp.stack([p, p]), PARAMS)
    good, bad = grads(0), poisoned(0, jnp.nan)
    g = jax.tree.map(lambda a, b: jnp.stack([a, b]), good, bad)
    s = jax.vmap(ADAM.init)(batch)
    p, s, _ = jax.vmap(ADAM_STEP)(batch, s, g)
    p0, _, _ = ADAM_STEP(PARAMS, ADAM.init(PARAMS), good)
    # vmapped, the cond is a select and the step is compiled with the batch: parameters of
    # size ~0.3 agree within 1e-7 (3 float32 ulp there; one entry cancels to 6e-7)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x[0], y, rtol=1e-6, atol=1e-7), p, p0)
    assert_same(jax.tree.map(lambda x: x[1], p), PARAMS)
    np.testing.assert_array_equal(np.asarray(s.guard.skipped), [0, 1])
    assert gx.guard_status(s)[0]["skipped"] == 1          # a batched state reports its worst copy


# -- the long run -------------------------------------------------------------------

def _mlp_loss(params, batch):
    x, y = batch
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean(jnp.square(h @ params["w2"] + params["b2"] - y))


def test_2000_steps_with_a_nan_every_97_steps_equal_the_run_without_those_batches():
    """Bit-exact: the guarded run over all 2000 batches (NaN/Inf inputs every 97th)
    ends with the parameters and optimizer state of the run over the clean ones."""
    key = jax.random.key(0)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w1": 0.5 * jax.random.normal(k1, (4, 8)), "b1": jnp.zeros(8),
              "w2": 0.5 * jax.random.normal(k2, (8, 1)), "b2": jnp.zeros(1)}
    xs = jax.random.normal(k3, (2000, 16, 4))
    ys = jnp.sin(xs.sum(-1, keepdims=True))
    bad = np.arange(2000) % 97 == 96
    poison = np.where(np.arange(2000) % 2 == 0, np.nan, np.inf)[bad]
    xs_bad = xs.at[np.nonzero(bad)[0], 0, 0].set(poison)

    guarded = gx.create("adam", learning_rate=0.01, wd=1e-4, skip_nonfinite=True)

    @jax.jit
    def run(xs, ys, n):
        """``n`` steps over the first ``n`` batches: one compile serves both runs."""
        def body(i, carry):
            p, s = carry
            g = jax.grad(_mlp_loss)(p, (xs[i], ys[i]))
            u, s = guarded.update(g, s, p)
            return gx.apply_updates(p, u), s
        return jax.lax.fori_loop(0, n, body, (params, guarded.init(params)))

    keep = np.nonzero(~bad)[0]
    pad = lambda a: jnp.concatenate([a[keep], jnp.zeros_like(a[:2000 - keep.size])])  # noqa: E731
    p_bad, s_bad = run(xs_bad, ys, 2000)
    p_clean, s_clean = run(pad(xs), pad(ys), keep.size)
    assert int(bad.sum()) == 20 and keep.size == 1980
    assert_same(p_bad, p_clean)
    assert_same(s_bad.inner, s_clean.inner)                 # step counters and moments too
    assert gx.guard_status(s_bad)[0]["skipped"] == 20 and gx.guard_status(s_clean)[0]["skipped"] == 0
    assert float(_mlp_loss(p_clean, (xs, ys))) < float(_mlp_loss(params, (xs, ys)))


# -- dynamic loss scaling -------------------------------------------------------------

def torch_scale_trajectory(overflows, init=2.0 ** 16, interval=2000, backoff=0.5, growth=2.0):
    """PyTorch ``_amp_update_scale_`` transcribed: the scale after each step."""
    scale, tracker, out = init, 0, []
    for found_inf in overflows:
        if found_inf:
            scale, tracker = scale * backoff, 0
        elif tracker + 1 == interval:
            scale, tracker = scale * growth, 0
        else:
            tracker += 1
        out.append(scale)
    return out


def test_loss_scale_trajectory_matches_pytorch_gradscaler():
    tx = dynamic_loss_scale(gx.create("sgd", learning_rate=0.1), growth_interval=3)
    step = make_step(tx)
    pattern = [True, True, False, False, False, False, True, False, False, False, False, False, False, True]
    p, s = PARAMS, tx.init(PARAMS)
    assert float(gx.get_loss_scale(s)) == 2.0 ** 16
    seen = []
    for k, overflow in enumerate(pattern):
        p, s, _ = step(p, s, poisoned(k, jnp.inf) if overflow else grads(k))
        seen.append(float(gx.get_loss_scale(s)))
    assert seen == torch_scale_trajectory(pattern, interval=3)
    assert gx.guard_status(s)[0]["skipped"] == sum(pattern)
    assert gx.guard_status(s)[0]["loss_scale"] == seen[-1]


def test_applied_step_uses_unscaled_gradients_and_skipped_step_changes_nothing():
    inner = gx.create("adam", learning_rate=0.1)
    tx = dynamic_loss_scale(inner, init_scale=2.0 ** 10)
    s, si = tx.init(PARAMS), inner.init(PARAMS)
    g = grads(0)
    u, s = tx.update(jax.tree.map(lambda x: x * 2.0 ** 10, g), s, PARAMS)
    ui, si = inner.update(g, si, PARAMS)
    assert_same(u, ui)
    assert_same(s.inner, si)
    u, s2 = tx.update(poisoned(1, jnp.nan), s, PARAMS)
    assert_same(s2.inner, s.inner)
    assert all(np.all(np.asarray(x) == 0) for x in jax.tree.leaves(u))
    assert float(gx.get_loss_scale(s2)) == 2.0 ** 9


def test_float16_overflow_is_skipped_and_the_scale_halves_until_it_fits():
    """A float16 model whose scaled backward pass overflows: the first steps are
    skipped while the scale halves; then training proceeds, parameters float16."""
    params = {"w": jnp.full((4, 4), 1.0, jnp.float16)}
    x = jnp.full((8, 4), 1.0, jnp.float16)
    tx = dynamic_loss_scale(gx.create("sgd", learning_rate=1e-4, multi_precision=True))

    def loss(p, s):
        h = x @ p["w"]                # float16 activations 4; dL/dW = 64 * scale: overflows above 2**9
        return gx.scale_loss(jnp.sum(h * h), s)             # scaled in float32

    @jax.jit
    def step(p, s):
        g = jax.grad(loss)(p, s)
        assert g["w"].dtype == jnp.float16
        u, s = tx.update(g, s, p)
        return gx.apply_updates(p, u), s, all_finite(g)

    p, s = params, tx.init(params)
    finite = []
    for _ in range(12):
        before = p
        p, s, ok = step(p, s)
        finite.append(bool(ok))
        if not ok:
            assert_same(p, before)
    assert finite[0] is False and finite[-1] is True
    first_ok = finite.index(True)
    assert all(not f for f in finite[:first_ok]) and all(finite[first_ok:])
    assert first_ok == 7 and float(gx.get_loss_scale(s)) == 2.0 ** 9
    assert gx.guard_status(s)[0]["skipped"] == first_ok
    assert p["w"].dtype == jnp.float16 and float(p["w"][0, 0]) < 1.0


def test_scale_growth_stays_finite_and_respects_bounds():
    tx = dynamic_loss_scale(gx.create("sgd"), init_scale=2.0 ** 126, growth_interval=1)
    s = tx.init(PARAMS)
    for k in range(3):
        _, s = tx.update(grads(k), s, PARAMS)
    assert float(gx.get_loss_scale(s)) == 2.0 ** 127            # 2**128 is inf in float32: kept
    tx = dynamic_loss_scale(gx.create("sgd"), init_scale=4.0, growth_interval=1, min_scale=1.0,
                            max_scale=8.0)
    s = tx.init(PARAMS)
    for k in range(3):
        _, s = tx.update(grads(k), s, PARAMS)
    assert float(gx.get_loss_scale(s)) == 8.0
    for k in range(5):
        _, s = tx.update(poisoned(k, jnp.nan), s, PARAMS)
    assert float(gx.get_loss_scale(s)) == 1.0


def test_loss_scale_hyperparameters_are_settable_without_retrace_and_range_checked():
    tx = dynamic_loss_scale(gx.create("sgd"), growth_interval=2000)
    s = tx.init(PARAMS)
    assert {"growth_factor", "backoff_factor", "growth_interval"} <= set(gx.hyper_names(s))
    traces = []
    step = jax.jit(lambda s, g: (traces.append(1), tx.update(g, s, PARAMS))[1])
    s = gx.set_hyper(s, growth_interval=2)
    for k in range(2):
        _, s = step(s, grads(k))
    assert float(gx.get_loss_scale(s)) == 2.0 ** 17 and len(traces) == 1
    with pytest.raises(ValueError, match=r"backoff_factor must be in \(0, 1\]"):
        gx.set_hyper(s, backoff_factor=2.0)
    with pytest.raises(ValueError, match=r"growth_factor must be in \[1, inf\)"):
        gx.set_hyper(s, growth_factor=0.5)


def test_loss_scaler_trips_when_the_scale_collapses():
    tx = dynamic_loss_scale(gx.create("sgd"), max_consecutive=4)
    s = tx.init(PARAMS)
    for k in range(4):
        _, s = tx.update(poisoned(k, jnp.nan), s, PARAMS)
    with pytest.raises(gx.NonFiniteError, match="loss scale fell to 4096"):
        gx.check_guard(s)


@pytest.mark.parametrize("kwargs,match", [
    (dict(init_scale=0.0), "init_scale must be in"), (dict(backoff=1.5), "backoff must be in"),
    (dict(growth=0.5), "growth must be in"), (dict(growth_interval=0), "growth_interval must be in"),
    (dict(growth_interval=2.5), "growth_interval must be an integer"),
    (dict(min_scale=4.0, max_scale=2.0), "min_scale must be <= max_scale"),
    (dict(max_consecutive=0), "max_consecutive must be an integer"),
])
def test_loss_scale_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dynamic_loss_scale(gx.create("sgd"), **kwargs)


def test_get_loss_scale_and_scale_loss():
    with pytest.raises(ValueError, match="no dynamic_loss_scale"):
        gx.get_loss_scale(gx.create("sgd").init(PARAMS))
    tx = dynamic_loss_scale(gx.create("sgd"), init_scale=2.0 ** 16)
    s = tx.init(PARAMS)
    scaled = gx.scale_loss(jnp.asarray(2.0, jnp.float16), s)
    assert scaled.dtype == jnp.float32 and float(scaled) == 2.0 ** 17
    assert float(jax.jit(gx.get_loss_scale)(s)) == 2.0 ** 16
    # nested: a loss scaler around a skip_nonfinite optimizer; both guards report
    tx = dynamic_loss_scale(gx.create("sgd", skip_nonfinite=True))
    kinds = [d["kind"] for d in gx.guard_status(tx.init(PARAMS))]
    assert kinds == ["dynamic_loss_scale", "skip_nonfinite"]
    state = tx.init(PARAMS)
    assert isinstance(state, LossScaleState) and isinstance(state.inner, SkipNonfiniteState)


def _state_like_adam(params):
    """An optimizer-shaped state: two params-shaped moments, a scalar count, an
    integer leaf and a leaf of another shape than any parameter."""
    z = jax.tree.map(jnp.zeros_like, params)
    return {"count": jnp.zeros((), jnp.int32), "mu": z, "nu": z, "lr": jnp.ones(()), "row": jnp.ones(5)}


@pytest.mark.parametrize("params", [{"a": jnp.ones((3, 2)), "b": jnp.ones(4), "n": jnp.arange(3)},
                                    jnp.ones((3, 2))],
                         ids=["tree", "one_array"])
def test_step_is_finite_by_position_finds_every_bad_element(params):
    """The per-position reduction (one loop per parameter) answers what one
    reduction per leaf answers: a NaN or an Inf in any floating element of the
    gradients, the updates or the state (the moments, a scalar, a leaf shaped
    like no parameter) makes the step non-finite; integer leaves are ignored."""
    check = jax.jit(step_is_finite, static_argnames=("check_updates", "check_state"))
    grads, updates, state = params, params, _state_like_adam(params)
    trees = (grads, updates, state)
    assert bool(check(*trees))
    for t in range(3):
        paths = jax.tree_util.tree_leaves_with_path(trees[t])
        for path, leaf in paths:
            if not jnp.issubdtype(leaf.dtype, jnp.inexact):
                continue
            for bad in (jnp.nan, jnp.inf):
                hurt = leaf.reshape(-1).at[-1].set(bad).reshape(leaf.shape)
                tree = jax.tree_util.tree_map_with_path(lambda p, x: hurt if p == path else x, trees[t])
                args = list(trees)
                args[t] = tree
                assert not bool(check(*args)), (t, path, bad)
                assert bool(check(*args, check_updates=t != 1, check_state=t != 2)) == (t != 0)


def test_guard_defaults_and_bounds_as_documented():
    """PyTorch GradScaler's defaults (init_scale 2**16, growth_interval 2000); a growth
    interval of 1 and ``max_consecutive=1`` are allowed (the bounds are >= 1) and the
    latter trips on the first skipped step."""
    s = dynamic_loss_scale(gx.create("sgd", learning_rate=0.1)).init({"w": jnp.ones(2)})
    assert float(s.scale) == 2.0 ** 16 and float(s.hyper["growth_interval"]) == 2000.0
    dynamic_loss_scale(gx.create("sgd", learning_rate=0.1), growth_interval=1)
    assert float(gx.set_hyper(s, growth_interval=1).hyper["growth_interval"]) == 1.0
    with pytest.raises(ValueError, match="growth_interval"):
        gx.set_hyper(s, growth_interval=0.5)
    tx = skip_nonfinite(gx.create("sgd", learning_rate=0.1), max_consecutive=1)
    _, s = tx.update({"w": jnp.array([jnp.nan, 1.0])}, tx.init({"w": jnp.ones(2)}), {"w": jnp.ones(2)})
    assert gx.guard_status(s)[0]["max_consecutive"] == 1 and gx.guard_status(s)[0]["tripped"]


def test_finiteness_of_trees_without_a_floating_leaf_is_true():
    """Integer and bool leaves are not checked: nothing to find non-finite."""
    ints = {"n": jnp.arange(3), "b": jnp.ones(2, bool)}
    assert bool(all_finite(ints)) and bool(all_finite())
    assert bool(step_is_finite(ints, ints, {"count": jnp.zeros((), jnp.int32)}))


def test_guard_limits_and_scale_bounds_as_documented():
    """``skip_nonfinite`` trips after 100 bad steps by default, ``dynamic_loss_scale`` after
    64; a backoff in (0, 1], a growth >= 1, bounds ``0 <= min_scale <= max_scale``, max_scale > 0."""
    sgd = gx.create("sgd", learning_rate=0.1)
    p = {"w": jnp.ones(2)}
    assert gx.guard_status(skip_nonfinite(sgd).init(p))[0]["max_consecutive"] == 100
    assert gx.guard_status(dynamic_loss_scale(sgd).init(p))[0]["max_consecutive"] == 64
    for kw in ({"growth": 1.0}, {"growth": 1.5}, {"backoff": 1.0}, {"min_scale": 0.0}, {"min_scale": 0.5},
               {"max_scale": 0.5}, {"min_scale": 2.0, "max_scale": 2.0}):
        dynamic_loss_scale(sgd, **kw)
    for kw in ({"backoff": 0.0}, {"max_scale": 0.0}, {"min_scale": 2.0, "max_scale": 1.0}):
        with pytest.raises(ValueError):
            dynamic_loss_scale(sgd, **kw)


def test_guard_status_of_stacked_copies_reports_the_worst():
    """A batched (vmap) state: any copy's trip, the smallest scale."""
    sgd = gx.create("sgd", learning_rate=0.1)
    s = dynamic_loss_scale(sgd, max_consecutive=1).init({"w": jnp.ones(2)})
    stacked = jax.tree.map(lambda x: jnp.stack([x, x]), s)
    stacked = stacked._replace(scale=jnp.array([4.0, 2.0]),
                               guard=stacked.guard._replace(tripped=jnp.array([0, 1], jnp.int32)))
    status = gx.guard_status(stacked)[0]
    assert status["tripped"] and status["loss_scale"] == 2.0


@pytest.mark.parametrize("guard", ["skip_nonfinite", "dynamic_loss_scale"])
@pytest.mark.parametrize("checks", [True, False], ids=["default", "grads_only"])
def test_guard_holds_no_more_xla_temporaries_than_optax_apply_if_finite(guard, checks):
    """XLA's own memory analysis of a donated step (machine-independent, not a
    timing): a guard may hold what optax.apply_if_finite holds (the updates the
    `cond` returns) and nothing more. The loss scaler once unscaled the
    gradients outside its `cond`, which stored them whole: twice optax's."""
    import optax  # noqa: PLC0415

    params = {f"w{i}": jnp.full((256, 256), 0.5, jnp.float32) for i in range(3)}

    def temporaries(tx):
        def step(p, s, g):
            u, s = tx.update(g, s, p)
            return optax.apply_updates(p, u), s
        state = jax.tree.map(jnp.copy, tx.init(params))
        compiled = jax.jit(step, donate_argnums=(0, 1)).lower(params, state, params).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    wrap = skip_nonfinite if guard == "skip_nonfinite" else dynamic_loss_scale
    ours = temporaries(wrap(gx.create("adam", learning_rate=1e-3), check_updates=checks, check_state=checks))
    theirs = temporaries(optax.apply_if_finite(optax.adam(1e-3), 10))
    assert ours <= theirs + 1024, (ours, theirs)  # a few scalars of slack


def test_loss_scale_below_one_skips_a_gradient_its_unscaling_overflows_even_checking_gradients_only():
    # 3e38 is finite; unscaled by a scale of 0.5 it is 6e38 = +Inf in float32. The unscaled
    # gradients are checked beside the raw ones, so the step is skipped with no update or
    # state check to catch what the rule would make of the Inf.
    tx = dynamic_loss_scale(gx.create("sgd", learning_rate=0.1), init_scale=0.5,
                            check_updates=False, check_state=False)
    step = make_step(tx)
    g = poisoned(0, 3e38)
    p, s, u = step(PARAMS, tx.init(PARAMS), g)
    assert_same(p, PARAMS)
    status = gx.guard_status(s)[0]
    assert status["skipped"] == 1 and status["loss_scale"] == 0.25


def test_loss_scale_reads_through_an_nnx_optimizers_variables():
    """``nnx.Optimizer`` holds the state in Variables (``OptArray``): `get_loss_scale` reads the array inside."""
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, dynamic_loss_scale(gx.create("adam", learning_rate=0.1), init_scale=2.0 ** 10),
                        wrt=nnx.Param)
    scale = gx.get_loss_scale(opt.opt_state)
    assert isinstance(scale, jax.Array) and float(scale) == 2.0 ** 10
