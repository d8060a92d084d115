"""The chainable pieces, one by one, and their interplay with optax."""
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform import pieces as P
from gradxform.pieces.internal import host_done

PARAMS = {"a": {"kernel": jnp.arange(6.0).reshape(3, 2) / 6, "bias": jnp.ones(2)}, "b": [jnp.full((2,), 2.0)]}
GRADS = jax.tree.map(lambda p: jnp.linspace(-3.0, 3.0, p.size).reshape(p.shape), PARAMS)


def apply(tx, grads=GRADS, params=PARAMS, steps=1):
    state = tx.init(params)
    for _ in range(steps):
        updates, state = tx.update(grads, state, params)
    return updates, state


def test_param_names_are_slash_joined_key_paths():
    assert gx.param_names(PARAMS) == ["a/bias", "a/kernel", "b/0"]


def test_rescale_clip_and_decay_in_the_order_given():
    tx = gx.chain(P.rescale(0.5), P.clip_by_value(1.0), P.add_decayed_weights(0.1))
    u, _ = apply(tx)
    want = jax.tree.map(lambda g, p: jnp.clip(0.5 * g, -1, 1) + 0.1 * p, GRADS, PARAMS)
    jax.tree.map(np.testing.assert_allclose, u, want)


def test_clip_none_is_identity_with_an_empty_state():
    tx = P.clip_by_value(None)
    u, s = apply(tx)
    assert jax.tree.leaves(s) == []
    jax.tree.map(np.testing.assert_array_equal, u, GRADS)


def test_clip_by_global_norm_matches_optax():
    u, _ = apply(P.clip_by_global_norm(1.0))
    want, _ = optax.clip_by_global_norm(1.0).update(GRADS, optax.clip_by_global_norm(1.0).init(PARAMS))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), u, want)


def test_wd_mult_by_glob_pattern():
    tx = P.add_decayed_weights(1.0, wd_mult={"*/bias": 0.0, "b/*": 2.0})
    zero = jax.tree.map(jnp.zeros_like, GRADS)
    u, _ = apply(tx, zero)
    np.testing.assert_array_equal(u["a"]["bias"], 0)
    np.testing.assert_allclose(u["a"]["kernel"], PARAMS["a"]["kernel"])
    np.testing.assert_allclose(u["b"][0], 2 * PARAMS["b"][0])


def test_track_step_counts_per_leaf_and_respects_update_mask():
    tx = gx.chain(P.track_step(0.1), P.scale_by_lr())
    state = tx.init(PARAMS)
    mask = {"a": {"kernel": True, "bias": False}, "b": [True]}
    _, state = tx.update(GRADS, state, PARAMS, update_mask=mask)
    _, state = tx.update(GRADS, state, PARAMS)
    np.testing.assert_array_equal(np.asarray(state[0].leaf_counts), [1, 2, 2])
    assert int(state[0].count) == 2


def test_counts_stay_shared_until_a_mask_and_unit_multipliers_are_not_stored():
    tx = gx.chain(P.track_step(0.1, lr_mult={"b/*": 2.0}), P.add_decayed_weights(0.1), P.scale_by_lr())
    state = tx.init(PARAMS)
    assert state[0].leaf_counts is None and state[1].wd_mult is None  # all wd_mult 1: nothing stored
    np.testing.assert_array_equal(np.asarray(state[0].lr_mult), [1.0, 1.0, 2.0])
    _, state = tx.update(GRADS, state, PARAMS)
    assert state[0].leaf_counts is None and int(state[0].count) == 1
    mask = {"a": {"kernel": True, "bias": False}, "b": [True]}
    _, state = tx.update(GRADS, state, PARAMS, update_mask=mask)  # the counts part here
    np.testing.assert_array_equal(np.asarray(state[0].leaf_counts), [1, 2, 2])
    # started per leaf, a scan's carry keeps one structure through masked steps
    def body(s, _):
        return tx.update(GRADS, s, PARAMS, update_mask=mask)[1], None
    per_leaf = gx.per_leaf_counts(tx.init(PARAMS), PARAMS)
    out, _ = jax.lax.scan(body, per_leaf, None, length=3)
    np.testing.assert_array_equal(np.asarray(out[0].leaf_counts), [0, 3, 3])


def test_read_lr_before_bump_gives_leaf0_the_previous_count():
    sched = gx.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=1.0)
    ctx = gx.StepContext()
    tx = gx.chain(P.track_step(1.0, schedule=sched, read_lr="before"))
    state = tx.init(PARAMS)
    _, state = tx.update(GRADS, state, PARAMS, gx_context=ctx)
    _, state = tx.update(GRADS, state, PARAMS, gx_context=ctx)
    # step 2: leaf 0 reads num_update 1 (lr 1.0); the others read 2 (lr 0.5)
    np.testing.assert_allclose(jax.tree.leaves(ctx["lr"]), [1.0, 0.5, 0.5])


def test_context_consumer_without_provider_explains_the_order():
    with pytest.raises(ValueError, match="track_step earlier"):
        apply(P.scale_by_lr())


def test_adam_moments_and_bias_correction_equal_optax_adam():
    tx = gx.chain(P.track_step(0.01), P.scale_by_adam_moments(0.9, 0.999, 1e-8),
                  P.bias_correction(0.9, 0.999), P.scale_by_lr())
    ref = optax.adam(0.01, eps=1e-8)
    s, r = tx.init(PARAMS), ref.init(PARAMS)
    for k in range(5):
        g = jax.tree.map(lambda x: x * (k + 1), GRADS)
        u, s = tx.update(g, s, PARAMS)
        v, r = ref.update(g, r, PARAMS)
    # optax puts epsilon outside the bias-corrected root; MXNet (and this chain) does not,
    # so the two differ by O(eps) only
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), u, v)


def test_optax_piece_inside_gradxform_chain_and_the_reverse():
    mixed = gx.chain(optax.clip_by_global_norm(1.0), P.scale_by_learning_rate(0.1))
    u, _ = apply(mixed)
    other = optax.chain(P.clip_by_global_norm(1.0), optax.scale(-0.1))
    v, _ = apply(other)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), u, v)
    # a whole gradxform optimizer inside optax.chain, under jit
    tx = optax.chain(optax.clip(5.0), gx.create("adam", learning_rate=0.01))
    state = tx.init(PARAMS)
    u, state = jax.jit(tx.update)(GRADS, state, PARAMS)
    assert jax.tree.structure(u) == jax.tree.structure(PARAMS)


def test_lazy_rows_leaves_absent_rows_and_their_state_alone():
    params = {"emb": jnp.ones((4, 2))}
    tx = gx.create("sgd", learning_rate=0.1, momentum=0.9, wd=0.1, lazy_update=True)
    state = tx.init(params)
    g1 = {"emb": jnp.array([[1.0, 1.0], [0, 0], [1, 1], [0, 0]])}
    u, state = tx.update(g1, state, params)
    np.testing.assert_array_equal(u["emb"][1], 0)
    np.testing.assert_array_equal(u["emb"][3], 0)
    assert float(u["emb"][0, 0]) < 0
    g2 = {"emb": jnp.array([[0.0, 0.0], [1, 1], [0, 0], [0, 0]])}
    u2, state = tx.update(g2, state, params)
    np.testing.assert_array_equal(u2["emb"][0], 0)  # row 0's momentum is kept, not applied
    mom = jax.tree.leaves(state)[-1]
    assert float(mom[0, 0]) == pytest.approx(float(u["emb"][0, 0]))


@pytest.mark.parametrize("name, kw", [("sgd", {"momentum": 0.9, "wd": 0.1, "lazy_update": True}),
                                      ("adam", {"lazy_update": True}), ("mindspore.lazy_adam", {})])
def test_lazy_rows_treat_a_0d_parameter_as_one_row(name, kw):
    # a 0-d parameter is the one row of a (1,) one (MXNet's weights are at least 1-D): with
    # a zero gradient its update is 0 and its state stays, step for step the same numbers
    tx = gx.create(name, learning_rate=0.1, **kw)
    p0, p1 = {"w": jnp.asarray(0.5)}, {"w": jnp.asarray([0.5])}
    s0, s1 = tx.init(p0), tx.init(p1)
    for g in (1.0, 0.0, 0.0, -2.0, 0.0):
        u0, s0 = tx.update({"w": jnp.asarray(g)}, s0, p0)
        u1, s1 = tx.update({"w": jnp.asarray([g])}, s1, p1)
        p0, p1 = gx.apply_updates(p0, u0), gx.apply_updates(p1, u1)
        np.testing.assert_array_equal(np.asarray(p0["w"]).reshape(1), np.asarray(p1["w"]))
        for a, b in zip(jax.tree.leaves(s0), jax.tree.leaves(s1)):
            np.testing.assert_array_equal(np.asarray(a).reshape(-1), np.asarray(b).reshape(-1))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_master_weights_keep_float32_copies(dtype):
    params = {"w": jnp.full((3,), 1.0, dtype)}
    grads = {"w": jnp.full((3,), 1e-4, dtype)}
    tx = gx.create("sgd", learning_rate=1.0, multi_precision=True)
    state = tx.init(params)
    for _ in range(10):
        u, state = tx.update(grads, state, params)
        params = gx.apply_updates(params, u)
    assert params["w"].dtype == dtype
    master = state.master["w"]
    assert master.dtype == jnp.float32
    grad32 = float(jnp.asarray(1e-4, dtype).astype(jnp.float32))
    np.testing.assert_allclose(master, 1.0 - 10 * grad32, rtol=1e-6)
    np.testing.assert_array_equal(params["w"], master.astype(dtype))  # the cast of the master copy


@pytest.mark.parametrize("call", ["init", "jit(init)", "optax.chain(tx).init"])
def test_float16_without_master_weights_warns_as_mxnet_at_the_users_line(call):
    tx = gx.create("adam")
    init = {"init": tx.init, "jit(init)": jax.jit(tx.init), "optax.chain(tx).init": optax.chain(tx).init}[call]
    with pytest.warns(UserWarning, match="Consider using multi_precision=True") as record:
        init({"w": jnp.ones(2, jnp.float16)})
    # the warning names this file, not a line inside gradxform, JAX or optax
    assert [os.path.basename(w.filename) for w in record] == [os.path.basename(__file__)]


def test_sgld_noise_is_reproducible_and_has_variance_lr():
    params = {"w": jnp.zeros((20000,))}
    tx = gx.create("sgld", learning_rate=0.04, seed=3)
    zero = {"w": jnp.zeros((20000,))}
    u1, s1 = apply(tx, zero, params)
    u2, _ = apply(tx, zero, params)
    np.testing.assert_array_equal(u1["w"], u2["w"])
    assert float(jnp.std(u1["w"])) == pytest.approx(0.2, rel=0.03)
    u3, _ = tx.update(zero, s1, params)
    assert not np.array_equal(u3["w"], u1["w"])


def test_gated_keeps_state_where_the_flag_is_off():
    on = gx.LocalKey("on", provider="flag_piece")

    def flag_piece(declared=True):
        def init(p):
            return ()

        def update(u, s, p=None, **extra):
            gx.StepContext.of(extra).publish_local({on: {"x": jnp.array(False), "y": jnp.array(True)}})
            return u, s
        if declared:
            gx.uses_context("flag_piece", provides=(on,))(update)
        return gx.GradientTransformation(init, update)

    params = {"x": jnp.ones(2), "y": jnp.ones(2)}
    tx = gx.chain(flag_piece(), P.gated(P.trace(0.9), on))
    u, state = tx.update(params, tx.init(params), params)
    np.testing.assert_array_equal(u["x"], 0)
    np.testing.assert_array_equal(state[1].trace["x"], 0)
    np.testing.assert_array_equal(state[1].trace["y"], 1)
    # a key is a field or a LocalKey; a writer declares what it writes
    with pytest.raises(TypeError, match="not a step-context field"):
        P.gated(P.trace(0.9), "on")
    undeclared = gx.chain(flag_piece(declared=False))
    # the writer is named where it is defined (an undeclared piece has no name of its own)
    with pytest.raises(TypeError, match=r"test_gated_keeps_state_where_the_flag_is_off writes 'on' into the "
                                        r"step context without declaring it"):
        undeclared.update(params, undeclared.init(params), params)


# -- the pieces' own defaults and bounds (issue 28's mutants: the families pass every
# argument, so only these tests reach them) ------------------------------------------

def test_decay_pieces_default_to_no_decay():
    """``wd=0`` by default, as optax's ``add_decayed_weights(weight_decay=0.0)``."""
    for tx in (P.add_decayed_weights(), gx.chain(P.track_step(0.1), P.add_decoupled_weight_decay())):
        u, _ = apply(tx)
        jax.tree.map(np.testing.assert_array_equal, u, GRADS)
    assert float(P.provide_weight_decay().init(PARAMS).hyper["wd"]) == 0.0


def test_clip_pieces_refuse_a_zero_bound():
    """A positive bound: a zero norm bound would zero every update. (``clip_by_value(0)``
    is MXNet's "no clip", an identity chosen before its range check.)"""
    with pytest.raises(ValueError, match="max_norm"):
        P.clip_by_global_norm(0.0)
    with pytest.raises(ValueError, match="clip_gradient"):
        P.clip_by_value(-1.0)


@pytest.mark.parametrize("max_norm", [1e-4, 5e-5, 10.0])
def test_clip_by_global_norm_as_mxnet_clip_global_norm(max_norm):
    """``mxnet/gluon/utils.py`` (1.9.1) ``clip_global_norm``: ``scale = max_norm /
    (total_norm + 1e-8)``, then ``min(scale, 1)``, in float64 here. A norm of 1e-4 makes
    the 1e-8 visible (2e-4 relative); a norm under the bound leaves the updates as they are."""
    grads = jax.tree.map(lambda g: g * 1e-4 / 4.9, GRADS)
    leaves = [np.asarray(g, np.float64) for g in jax.tree.leaves(grads)]
    norm = np.sqrt(sum(np.sum(x * x) for x in leaves))
    scale = min(max_norm / (norm + 1e-8), 1.0)
    u, _ = apply(P.clip_by_global_norm(max_norm), grads=grads)
    for got, x in zip(jax.tree.leaves(u), leaves):
        np.testing.assert_allclose(got, x * scale, rtol=2e-6)  # float32 norm and product


def test_clip_by_global_norm_is_not_bit_exact_when_fused():
    """Its norm is summed over buffers in another order: the Trainer must not pick
    the fused path for it on its own (`gradxform.fused.bit_exact`)."""
    assert gx.fused.bit_exact(P.clip_by_value(1.0))
    assert not gx.fused.bit_exact(P.clip_by_global_norm(1.0))


def test_scaling_pieces_defaults_bounds_and_factor():
    """``rescale`` and ``unscale`` default to 1 (MXNet's ``rescale_grad=1.0``, MindSpore's
    ``loss_scale=1.0``); a loss scale of 0 is refused (it divides); ``scale(f)`` multiplies."""
    for tx in (P.rescale(), P.unscale()):
        u, _ = apply(tx)
        jax.tree.map(np.testing.assert_array_equal, u, GRADS)
    with pytest.raises(ValueError, match="loss_scale"):
        P.unscale(0.0)
    u, _ = apply(P.scale(0.5))
    jax.tree.map(lambda a, g: np.testing.assert_array_equal(a, g * 0.5), u, GRADS)


def test_master_weights_hold_nothing_for_a_float32_leaf():
    """As MXNet's ``create_state_multi_precision``: a master copy only for float16
    weights; a float32 leaf's slot is empty (no second copy of the model)."""
    tx = P.with_master_weights(P.scale(-1.0))
    state = tx.init({"h": jnp.ones(3, jnp.float16), "f": jnp.ones(3, jnp.float32)})
    assert state.master["h"].shape == (3,) and state.master["f"].size == 0


def test_lr_mult_as_any_mapping_not_only_a_dict():
    """A read-only mapping (flax's FrozenDict, ``MappingProxyType``) is a mapping of
    selections, not a resolver to call."""
    tx = P.track_step(0.1, lr_mult=types.MappingProxyType({"b/*": 2.0}))
    assert [float(x) for x in np.asarray(tx.init(PARAMS).lr_mult)] == [1.0, 1.0, 2.0]


def test_host_done_is_the_most_updates_any_counter_records():
    """``host_done``: the updates done, where a host-side schedule resumes: the largest
    count over every step counter in the state (two counters: groups stepped apart)."""
    a, b = P.track_step(0.1).init(PARAMS), P.track_step(0.1).init(PARAMS)  # e.g. two optimizers' states
    state = (a._replace(count=jnp.asarray(5, jnp.int32)), b._replace(count=jnp.asarray(3, jnp.int32)))
    assert host_done(state) == 5 and host_done(state[::-1]) == 5
    assert host_done(a._replace(count=jnp.asarray([2, 7, 4], jnp.int32))) == 7  # counts stacked (vmap)
    assert host_done(()) == 0


# -- pieces/_trust.py: LAMB's and LARS's pieces against their docstrings' formulas and optax --

def test_corrected_moments_defaults_and_bounds():
    """MXNet LAMB's defaults (beta1 0.9, beta2 0.999, epsilon 1e-6); betas in [0, 1),
    epsilon > 0."""
    h = P.scale_by_corrected_moments().init(PARAMS).hyper
    np.testing.assert_allclose([float(h["beta1"]), float(h["beta2"]), float(h["epsilon"])],
                               [0.9, 0.999, 1e-6], rtol=1e-7)
    for kw in ({"beta1": 1.0}, {"beta1": 1.5}, {"beta2": 1.0}, {"beta2": 1.5}, {"epsilon": 0.0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            P.scale_by_corrected_moments(**kw)


def test_corrected_moments_epsilon_outside_the_corrected_root():
    """``(m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`` (MXNet ``lamb_update_phase1``), in
    float64, with gradients of 1e-6 so that eps (1e-6) weighs as much as the root."""
    g = jax.tree.map(lambda x: x * 1e-6, GRADS)
    u, _ = apply(gx.chain(P.track_step(0.1), P.scale_by_corrected_moments()), grads=g, steps=2)
    for got, x in zip(jax.tree.leaves(u), jax.tree.leaves(g)):
        x = np.asarray(x, np.float64)
        m = 0.1 * x * 0.9 + 0.1 * x
        v = 0.001 * x * x * 0.999 + 0.001 * x * x
        want = (m / (1 - 0.9 ** 2)) / (np.sqrt(v / (1 - 0.999 ** 2)) + 1e-6)
        np.testing.assert_allclose(got, want, rtol=2e-5)  # float32 moments and root


@pytest.mark.parametrize("case", ["zero_param", "zero_update", "unit_param"])
def test_trust_ratio_as_optax_with_zero_norms(case):
    """``u * |w| / |u|``, 1 where either norm is 0: optax's ``scale_by_trust_ratio``."""
    params = {"a": jnp.zeros(3), "b": jnp.array([0.6, 0.8]), "c": jnp.array([3.0, 4.0])}
    grads = {"a": jnp.array([1.0, 2.0, 2.0]), "b": jnp.array([2.0, 0.0]), "c": jnp.array([0.5, 0.5])}
    if case == "zero_update":
        grads = {**grads, "c": jnp.zeros(2)}
    if case == "unit_param":
        params = {**params, "a": jnp.array([1.0, 0.0, 0.0])}
    u, _ = apply(P.scale_by_trust_ratio(), grads=grads, params=params)
    want, _ = optax.scale_by_trust_ratio().update(grads, optax.scale_by_trust_ratio().init(params), params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), u, want)


def _lars_ratio_of(params, grads, wd, **kw):
    """The ratio `provide_lars_ratio` publishes, read by ``scale_by_lr(factor_key=...)``
    with lr 1: ``u = -ratio * g``."""
    key = gx.LocalKey("test_ratio", "the test")
    tx = gx.chain(P.track_step(1.0), P.provide_weight_decay(wd), P.provide_lars_ratio(key=key, **kw),
                  P.scale_by_lr(factor_key=key))
    u, _ = apply(tx, grads=grads, params=params)
    return jax.tree.map(lambda a, g: float(-a[0] / g[0]), u, grads)


def test_lars_ratio_as_mxnets_multi_lars():
    """MXNet ``multi_lars`` (src/operator/contrib/multi_lars-inl.h): ``eta * |w| / (|g| +
    wd |w| + eps)`` where both norms are positive, else 1; defaults eta 0.001, eps 0."""
    params = {"a": jnp.zeros(2), "b": jnp.array([3.0, 4.0])}
    grads = {"a": jnp.array([1.0, 1.0]), "b": jnp.array([0.6, 0.8])}
    got = _lars_ratio_of(params, grads, 0.1)
    assert got["a"] == 1.0  # |w| = 0
    np.testing.assert_allclose(got["b"], 0.001 * 5.0 / (1.0 + 0.1 * 5.0), rtol=1e-6)
    got = _lars_ratio_of(params, grads, 0.1, eta=0.5, eps=0.25)
    np.testing.assert_allclose(got["b"], 0.5 * 5.0 / (1.0 + 0.1 * 5.0 + 0.25), rtol=1e-6)


def test_lr_ratio_trace_after_a_zero_rate_and_its_bound():
    """``m = momentum * lr / last_lr * m + u``, ``momentum * m`` where last_lr is 0 (a
    schedule that starts at 0); momentum in [0, 1]."""
    rates = iter([0.0, 0.5, 0.25])
    tx = gx.chain(P.track_step(1.0, schedule=lambda n, base: jnp.where(n == 1, 0.0, jnp.where(n == 2, 0.5, 0.25))),
                  P.trace_with_lr_ratio(0.9))
    state = tx.init(PARAMS)
    m = jax.tree.map(lambda g: np.zeros(g.shape), GRADS)
    last = 0.0
    for _ in range(3):
        lr = next(rates)
        u, state = tx.update(GRADS, state, PARAMS)
        factor = 0.9 * lr / last if last != 0 else 0.9
        m = jax.tree.map(lambda mm, g: factor * mm + np.asarray(g, np.float64), m, GRADS)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), u, m)
        last = lr
    P.trace_with_lr_ratio(1.0)
    with pytest.raises(ValueError, match="momentum"):
        P.trace_with_lr_ratio(1.5)


def test_trust_pieces_are_not_bit_exact_when_fused():
    """Per-leaf norms as segment sums in another order: never fused on the Trainer's own."""
    assert not gx.fused.bit_exact(P.scale_by_trust_ratio())
    assert not gx.fused.bit_exact(gx.chain(P.provide_weight_decay(0.0),
                                           P.provide_lars_ratio(key=gx.LocalKey("k", "test"))))


def test_lars_ratio_is_one_for_a_zero_gradient_under_decay():
    """A zero gradient takes ratio 1 (``g_norm > 0`` fails in ``multi_lars``), so the decay
    alone moves the weight by ``lr * wd * w``, as MXNet LARS does."""
    key = gx.LocalKey("test_ratio", "the test")
    tx = gx.chain(P.track_step(1.0), P.provide_weight_decay(0.1), P.provide_lars_ratio(key=key),
                  P.add_decayed_weights(None), P.scale_by_lr(factor_key=key))
    params = {"b": jnp.array([3.0, 4.0])}
    u, _ = apply(tx, grads={"b": jnp.zeros(2)}, params=params)
    np.testing.assert_allclose(u["b"], -0.1 * np.array([3.0, 4.0]), rtol=1e-6)


def _mxnet_lrs(masks, read_lr, n=3, schedule=lambda k: 0.5 ** k):
    """MXNet 1.9.1's ``Optimizer._update_count`` and ``_get_lr`` (optimizer.py) over
    Updater's index loop: each updated index bumps its own count, ``num_update`` is the
    largest count seen, and its rate is ``schedule(num_update)`` read after the bump (most
    optimizers) or before it (``read_lr='before'``). Masked-out indices are not visited."""
    counts, num_update, out = [0] * n, 0, []
    for mask in masks:
        lrs = [None] * n
        for i in range(n):
            if not mask[i]:
                continue
            if read_lr == "before":
                lrs[i] = schedule(num_update)
            counts[i] += 1
            num_update = max(num_update, counts[i])
            if read_lr == "after":
                lrs[i] = schedule(num_update)
        out.append(lrs)
    return out


@pytest.mark.parametrize("read_lr", ["after", "before"])
def test_per_leaf_rates_under_masks_as_mxnet_counts_them(read_lr):
    """Stale leaves (an update mask) make the counts differ; every leaf's rate is read at
    the count MXNet's sequential loop gives it, in both orders."""
    masks = [[True, False, True], [True, False, True], [False, True, True], [True, True, False],
             [False, True, False], [True, True, True], [False, True, False], [True, True, True]]
    tx = P.track_step(1.0, schedule=lambda n, base: 0.5 ** n.astype(jnp.float32), read_lr=read_lr)
    state = tx.init(PARAMS)
    want = _mxnet_lrs(masks, read_lr)
    for step, mask in enumerate(masks):
        ctx = gx.StepContext()
        tree = None if all(mask) else jax.tree.structure(PARAMS).unflatten(mask)  # None: every leaf
        _, state = tx.update(GRADS, state, PARAMS, update_mask=tree, gx_context=ctx)
        got = jax.tree.leaves(ctx["lr"])
        for i in range(3):
            if mask[i]:
                assert float(got[i]) == want[step][i], (step, i, [float(x) for x in got], want[step])


def test_scale_by_lr_sign_and_factor():
    """``u -> sign * lr * factor * u``: a sign other than -1 scales too."""
    key = gx.LocalKey("test_ratio", "the test")
    u, _ = apply(gx.chain(P.track_step(0.5), P.scale_by_lr(sign=-2.0)))
    jax.tree.map(lambda a, g: np.testing.assert_allclose(a, -1.0 * g, rtol=1e-6), u, GRADS)
    tx = gx.chain(P.track_step(0.5), P.provide_weight_decay(0.0), P.provide_lars_ratio(eta=1.0, key=key),
                  P.scale_by_lr(sign=2.0, factor_key=key))
    u, _ = apply(tx)
    w = jax.tree.map(lambda p: float(np.linalg.norm(p)), PARAMS)
    g = jax.tree.map(lambda x: float(np.linalg.norm(x)), GRADS)
    jax.tree.map(lambda a, x, wn, gn: np.testing.assert_allclose(a, 2.0 * 0.5 * (wn / gn) * np.asarray(x), rtol=1e-5),
                 u, GRADS, w, g)


def test_scale_by_learning_rate_counts_from_zero():
    """``begin_num_update=0`` by default: a schedule reads num_update 1 at the first update."""
    u, _ = apply(P.scale_by_learning_rate(1.0, schedule=lambda n, base: 1.0 / n.astype(jnp.float32)))
    jax.tree.map(lambda a, g: np.testing.assert_allclose(a, -g, rtol=1e-6), u, GRADS)
