"""The shared property harness: every registered optimizer, one row of tests/cases.py each.

Properties: jit == op-by-op; vmap over independent problems == a loop;
bf16/f16/f32 parameters keep their dtype; one trace while set_hyper changes
lr / wd / momentum / betas; the state keeps its structure and no NaN appears
over 200 steps on a quadratic; optax interop both ways; a non-finite step
with skip_nonfinite=True leaves parameters and state untouched; a step that
donates parameters and state runs (the state holds no buffer twice).
Compile time dominates: each optimizer's jitted step is built once and shared, with quick compile
(`quick_compile`) wherever the claim is a tolerance, a dtype or finiteness.
"""
from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import cases
import gradxform as gx
import quick_compile

NAMES = cases.names()

PARAMS = {"dense": {"kernel": jnp.asarray([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], jnp.float32),
                    "bias": jnp.asarray([0.1, -0.2], jnp.float32)},
          "scale": [jnp.asarray(1.5, jnp.float32)]}
TARGET = jax.tree.map(lambda p: jnp.full_like(p, 0.3), PARAMS)


def quad_grad(params):
    """Gradient of 0.5 * sum((w - 0.3)^2) (computed in each leaf's dtype)."""
    return jax.tree.map(lambda p: p - jnp.asarray(0.3, p.dtype), params)


def quad_loss(params):
    return sum(jnp.sum(jnp.square(p.astype(jnp.float32) - 0.3)) for p in jax.tree.leaves(params)) / 2


def grads_at(k: int, params=PARAMS):
    """Deterministic, varied gradients for step k."""
    return jax.tree.map(lambda p, i: (jnp.sin(jnp.arange(p.size, dtype=jnp.float32) + 1.7 * i + k)
                                      .reshape(p.shape).astype(p.dtype)),
                        params, {"dense": {"kernel": 0, "bias": 1}, "scale": [2]})


def close(a, b, rtol, atol):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64),
                                                         rtol=rtol, atol=atol), a, b)


class Fixture:
    """One optimizer, its jitted step and a trace counter, built once per name."""

    def __init__(self, name):
        self.name, self.case = name, cases.case(name)
        self.tx = cases.create(name)
        self.traces = 0

        def step(params, state, grads):
            self.traces += 1
            updates, state = self.tx.update(grads, state, params)
            return gx.apply_updates(params, updates), state

        self.raw_step = step
        self.step = quick_compile.jit(step)  # tolerances only: tests comparing bits use `exact_step`
        self.exact_step = jax.jit(step)      # the default compiler, users' own

    def run(self, steps, jit=True, params=PARAMS, state=None, exact=False):
        state = self.tx.init(params) if state is None else state
        fn = (self.exact_step if exact else self.step) if jit else self.raw_step
        for k in range(steps):
            params, state = fn(params, state, grads_at(k, params))
        return params, state


@functools.lru_cache(maxsize=None)
def fixture(name) -> Fixture:
    return Fixture(name)


def test_table_rows_name_registered_optimizers():
    """A row for a name that is not registered is a typo (or a removed optimizer)."""
    assert set(cases.TABLE) <= set(NAMES), sorted(set(cases.TABLE) - set(NAMES))


@pytest.mark.parametrize("name", NAMES)
def test_jit_matches_op_by_op(name):
    f = fixture(name)
    pj, sj = f.run(3, jit=True)
    pn, sn = f.run(3, jit=False)
    close(pj, pn, f.case.rtol, f.case.atol)
    close(sj, sn, f.case.rtol, f.case.atol)


@pytest.mark.parametrize("name", NAMES)
def test_shared_and_per_leaf_step_counts_give_the_same_numbers(name):
    # init's one shared count (StepState.leaf_counts None) against the same counts written
    # out per leaf, the form a masked step or a migrated state uses: bit for bit
    f = fixture(name)
    shared = f.run(3, exact=True)
    per_leaf = f.run(3, state=gx.per_leaf_counts(f.tx.init(PARAMS), PARAMS), exact=True)
    jax.tree.map(np.testing.assert_array_equal, shared[0], per_leaf[0])
    jax.tree.map(np.testing.assert_array_equal, gx.per_leaf_counts(shared[1], PARAMS), per_leaf[1])


@pytest.mark.parametrize("name", NAMES)
def test_one_trace_while_set_hyper_changes_hyperparameters(name):
    f = fixture(name)
    params, state = PARAMS, f.tx.init(PARAMS)
    params, state = f.step(params, state, grads_at(0))
    traces = f.traces
    present = [n for n in ("learning_rate", "wd", "weight_decay", "momentum", "beta1", "beta2")
               if n in gx.hyper_names(state)]
    assert present, f"{name}: none of lr / wd / momentum / betas is a hyperparameter in its state"
    for k, value in enumerate((0.5, 0.25, 0.125)):
        new = {n: value * (gx.get_hyper(state, n) if n != "learning_rate" else 0.01) for n in present}
        state = gx.set_hyper(state, **new)
        for n, v in new.items():
            np.testing.assert_allclose(float(gx.get_hyper(state, n)), float(v), rtol=1e-7)
        params, state = f.step(params, state, grads_at(k + 1))
    jax.block_until_ready(params)
    assert f.traces == traces, f"{name}: set_hyper({present}) caused {f.traces - traces} retrace(s)"


@pytest.mark.parametrize("name", NAMES)
def test_200_steps_quadratic_finite_and_state_stable(name):
    f = fixture(name)
    state0 = f.tx.init(PARAMS)

    @quick_compile.jit
    def run(params, state):
        def body(carry, _):
            p, s = carry
            u, s = f.tx.update(quad_grad(p), s, p)
            return (gx.apply_updates(p, u), s), None
        return jax.lax.scan(body, (params, state), None, length=200)[0]

    params, state = run(PARAMS, state0)
    assert jax.tree.structure(state) == jax.tree.structure(state0)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(state0)):
        assert a.shape == b.shape and a.dtype == b.dtype
    for leaf in jax.tree.leaves((params, state)):
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            assert np.all(np.isfinite(np.asarray(leaf, np.float64))), name
    if f.case.converges:
        assert float(quad_loss(params)) < float(quad_loss(PARAMS)), name


@pytest.mark.parametrize("name", NAMES)
def test_vmap_over_independent_problems_matches_a_loop(name):
    f = fixture(name)
    batch = jax.tree.map(lambda p: jnp.stack([p, 2 * p, -p]), PARAMS)
    grads = jax.tree.map(lambda p: jnp.stack([jnp.cos(p), p, jnp.sin(3 * p)]), PARAMS)
    states = jax.vmap(f.tx.init)(batch)
    step = quick_compile.jit(jax.vmap(f.raw_step))
    p, s = step(batch, states, grads)
    p, s = step(p, s, grads)
    for i in range(3):
        pi, gi = jax.tree.map(lambda x: x[i], batch), jax.tree.map(lambda x: x[i], grads)
        si = f.tx.init(pi)
        pi, si = f.step(pi, si, gi)
        pi, si = f.step(pi, si, gi)
        close(jax.tree.map(lambda x: x[i], p), pi, f.case.rtol, f.case.atol)
        close(jax.tree.map(lambda x: x[i], s), si, f.case.rtol, f.case.atol)


@pytest.mark.parametrize("name", NAMES)
def test_low_precision_params_keep_their_dtype(name):
    params = {"f32": PARAMS["dense"]["kernel"], "f16": PARAMS["dense"]["kernel"].astype(jnp.float16),
              "bf16": PARAMS["dense"]["bias"].astype(jnp.bfloat16)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MXNet's float16-without-multi_precision warning
        tx = cases.create(name)
        state = tx.init(params)

    @quick_compile.jit
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        assert jax.tree.map(lambda x: x.dtype, u) == jax.tree.map(lambda x: x.dtype, p)
        return gx.apply_updates(p, u), s

    p = params
    for k in range(2):
        p, state = step(p, state, jax.tree.map(lambda x: (jnp.cos(x.astype(jnp.float32) + k)).astype(x.dtype), p))
    assert jax.tree.map(lambda x: x.dtype, p) == jax.tree.map(lambda x: x.dtype, params)
    for leaf in jax.tree.leaves(p):
        assert np.all(np.isfinite(np.asarray(leaf, np.float32)))


@pytest.mark.parametrize("name", NAMES)
def test_optax_interop_both_ways(name):
    """gradxform optimizer inside optax.chain, and an optax piece inside gradxform.chain.
    Op by op: the shapes are those of the other tests, so no new compile."""
    f = fixture(name)
    outer = optax.chain(optax.identity(), f.tx, optax.scale(2.0))   # ours inside optax
    inner = gx.chain(optax.scale(0.5), f.tx)                         # optax inside ours
    so, si = outer.init(PARAMS), inner.init(PARAMS)
    ref_o = ref_i = f.tx.init(PARAMS)
    for k in range(2):
        g = grads_at(k)
        uo, so = outer.update(g, so, PARAMS)
        ui, si = inner.update(g, si, PARAMS)
        u, ref_o = f.tx.update(g, ref_o, PARAMS)
        close(uo, jax.tree.map(lambda x: 2 * x, u), f.case.rtol, f.case.atol)
        u, ref_i = f.tx.update(jax.tree.map(lambda x: 0.5 * x, g), ref_i, PARAMS)
        close(ui, u, f.case.rtol, f.case.atol)
    close(so[1], ref_o, f.case.rtol, f.case.atol)
    close(si[1], ref_i, f.case.rtol, f.case.atol)


def _poison(tree, value):
    """``tree`` with one element of its first non-empty leaf set to ``value``."""
    leaves, treedef = jax.tree.flatten(tree)
    i = next(j for j, x in enumerate(leaves) if x.size)
    leaves[i] = leaves[i].reshape(-1).at[0].set(value).reshape(leaves[i].shape)
    return treedef.unflatten(leaves)


@pytest.mark.parametrize("name", NAMES)
def test_nonfinite_step_changes_nothing(name):
    tx = cases.create(name, skip_nonfinite=True)  # every optimizer takes the keyword

    @quick_compile.jit  # five steps: a quick compile costs less than running them op by op
    def step(p, s, g):
        u, s = tx.update(g, s, p)
        return gx.apply_updates(p, u), s, u

    p, s = PARAMS, tx.init(PARAMS)
    p, s, _ = step(p, s, grads_at(0))
    for k, bad in enumerate((jnp.nan, jnp.inf, -jnp.inf)):
        p2, s2, u = step(p, s, _poison(grads_at(1), bad))
        for leaf in jax.tree.leaves(u):
            assert np.all(np.asarray(leaf) == 0), name
        jax.tree.map(np.testing.assert_array_equal, p2, p)          # bit-exact
        status = gx.guard_status(s2)[0]
        assert status["skipped"] == k + 1 and status["consecutive"] == k + 1
        inner_before, inner_after = _inner(s), _inner(s2)
        jax.tree.map(np.testing.assert_array_equal, inner_after, inner_before)
        s = s2
    p3, s3, _ = step(p, s, grads_at(1))
    assert gx.guard_status(s3)[0]["consecutive"] == 0
    assert any(np.any(np.asarray(a) != np.asarray(b)) for a, b in zip(jax.tree.leaves(p3), jax.tree.leaves(p)))


EXTREME = (1e38, 3e38, -3e38)
GUARDS = {"skip_nonfinite": lambda name: cases.create(name, skip_nonfinite=True),
          # scale 1: the extreme gradients reach the optimizer as they are
          "dynamic_loss_scale": lambda name: gx.pieces.dynamic_loss_scale(
              cases.create(name), init_scale=1.0, growth_interval=1000)}


@functools.lru_cache(maxsize=None)
def _extreme_grads():
    """Six steps of float32 gradients (built once): a normal step; one
    element of 1e38, 3e38, -3e38 among normal values (each may overflow a sum
    of squares, a momentum or an unscaled loss-scaled gradient); every other
    element of every leaf +-3e38; a normal step."""
    def alternate(g):
        flat = g.reshape(-1).copy()
        flat[::2] = np.float32(3e38) * np.where(np.arange(flat.size)[::2] % 4 == 0, 1, -1)
        return flat.reshape(g.shape)

    normal = [jax.device_get(grads_at(k)) for k in range(6)]
    seq = [normal[0]]
    for k, value in enumerate(EXTREME):
        leaves, treedef = jax.tree.flatten(normal[k + 1])
        first = leaves[0].copy()                      # PARAMS' first leaf is not empty
        first.reshape(-1)[0] = value
        seq.append(treedef.unflatten([first] + leaves[1:]))
    seq += [jax.tree.map(alternate, normal[4]), normal[5]]
    return [jax.tree.map(jnp.asarray, g) for g in seq]


def _bits(tree):
    return [(x.dtype, x.shape, x.tobytes()) for x in map(np.asarray, jax.tree.leaves(tree))]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("guard", GUARDS)
def test_extreme_finite_gradients_leave_params_and_state_finite(guard, name):
    """Under either guard, finite gradients up to +-3e38 never leave a NaN/Inf
    in the parameters or the state: each step either applies finite numbers or
    is skipped, and a skipped step leaves parameters and inner state bit for
    bit as they were (zero updates; the loss scale halves). Op by op, as
    `test_nonfinite_step_changes_nothing`: six steps cost less than two compiles."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tx = GUARDS[guard](name)
    p, s = PARAMS, tx.init(PARAMS)
    prev = jax.device_get((p, s))
    for i, g in enumerate(_extreme_grads()):
        u, s = tx.update(g, s, p)
        p = gx.apply_updates(p, u)
        now = jax.device_get((p, s, u))
        for leaf in jax.tree.leaves(now):
            if np.issubdtype(leaf.dtype, np.inexact):
                assert np.all(np.isfinite(leaf)), (name, guard, i)
        before, after = gx.guard_status(prev[1])[0], gx.guard_status(now[1])[0]
        skipped = after["skipped"] - before["skipped"]
        assert skipped in (0, 1), (name, guard, i)
        if skipped:
            assert all(np.all(x == 0) for x in jax.tree.leaves(now[2])), (name, guard, i)
            assert _bits(now[0]) == _bits(prev[0]), (name, guard, i)
            assert _bits(now[1].inner) == _bits(prev[1].inner), (name, guard, i)
            assert after["consecutive"] == before["consecutive"] + 1, (name, guard, i)
        else:
            assert after["consecutive"] == 0, (name, guard, i)
        if guard == "dynamic_loss_scale":
            assert after["loss_scale"] == before["loss_scale"] * (0.5 if skipped else 1.0), (name, i)
        prev = now[:2]


def _inner(state):
    """The optimizer state inside the (first) guard."""
    from gradxform.pieces._guards import SkipNonfiniteState  # noqa: PLC0415
    found = []

    def go(node):
        if isinstance(node, SkipNonfiniteState):
            found.append(node.inner)
        elif isinstance(node, (tuple, list)):
            for c in node:
                go(c)
    go(state)
    return found[0]


@pytest.mark.parametrize("name", NAMES)
def test_step_can_donate_params_and_state(name):
    fx = fixture(name)
    params = jax.tree.map(jnp.copy, PARAMS)
    state = fx.tx.init(params)
    step = quick_compile.jit(fx.raw_step, donate_argnums=(0, 1) if fx.case.donatable else (0,))
    for k in range(2):  # XLA refuses a buffer donated twice; donation must not change numbers
        params, state = step(params, state, grads_at(k, params))
    ref_params, _ = fx.run(2)
    close(params, ref_params, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_empty_params_tree(name):
    """init and update on ``{}`` (a model with no trainable parameters) give empty trees."""
    tx = cases.create(name)
    state = tx.init({})
    for _ in range(2):
        updates, state = tx.update({}, state, {})
        assert updates == {}
    assert jax.tree.structure(state) == jax.tree.structure(tx.init({}))


ZERO_SIZE = {**PARAMS, "empty": jnp.zeros((0,), jnp.float32), "empty_rows": jnp.zeros((0, 3), jnp.float32),
             "empty_cols": jnp.zeros((3, 0), jnp.float32)}


@pytest.mark.parametrize("name", NAMES)
def test_zero_size_leaves(name):
    """Leaves with no elements next to ordinary ones: updates keep every leaf's
    shape and dtype, the state its structure, and nothing turns non-finite (op
    by op: a jitted step would compile another program per optimizer)."""
    tx = cases.create(name)
    params, state = ZERO_SIZE, tx.init(ZERO_SIZE)
    structure = jax.tree.structure(state)
    for k in range(2):
        grads = {**grads_at(k), **{key: jnp.zeros_like(ZERO_SIZE[key]) for key in ("empty", "empty_rows",
                                                                                    "empty_cols")}}
        updates, state = tx.update(grads, state, params)
        assert jax.tree.map(lambda u: (u.shape, u.dtype), updates) == \
            jax.tree.map(lambda p: (p.shape, p.dtype), params), name
        params = gx.apply_updates(params, updates)
    assert jax.tree.structure(state) == structure
    for path, leaf in jax.tree_util.tree_flatten_with_path((params, state))[0]:
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            assert np.all(np.isfinite(np.asarray(leaf, np.float64))), f"{name}: {jax.tree_util.keystr(path)}"
    # the ordinary leaves still train
    assert not np.array_equal(np.asarray(params["dense"]["kernel"]), np.asarray(PARAMS["dense"]["kernel"])), name


@pytest.mark.parametrize("name", NAMES)
def test_inside_a_users_own_pmap_loop(name):
    """The data-parallel loop users write themselves: per-device gradients, `lax.pmean`, then
    ``tx.update`` on each device's replica; every replica equals the one-device run on the mean."""
    f = fixture(name)
    n = 2
    per_device = [grads_at(0), jax.tree.map(lambda g: -0.5 * g, grads_at(1))]
    stacked = jax.tree.map(lambda *g: jnp.stack(g), *per_device)
    mean = jax.tree.map(lambda *g: (g[0] + g[1]) / 2, *per_device)

    def step(params, state, grads):
        grads = jax.lax.pmean(grads, "devices")
        updates, state = f.tx.update(grads, state, params)
        return gx.apply_updates(params, updates), state

    replicate = lambda t: jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (n,) + np.shape(x)), t)  # noqa: E731
    def quick_pmap(fn, *args, **kw):  # the user's pmap program, compiled quickly (a tolerance below)
        return jax.pmap(fn, devices=jax.devices()[:n], **kw).lower(*args).compile(quick_compile.QUICK)(*args)

    init = quick_pmap(f.tx.init, replicate(PARAMS))
    p, s = quick_pmap(step, replicate(PARAMS), init, stacked, axis_name="devices")
    pe, se = f.step(PARAMS, f.tx.init(PARAMS), mean)
    for i in range(n):
        close(jax.tree.map(lambda x: x[i], p), pe, f.case.rtol, f.case.atol)
