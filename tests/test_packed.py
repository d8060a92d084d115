"""gradxform.fused.packed: small leaves packed inside the step, the state per leaf.

The state keeps its per-leaf form; the numbers are those of the per-leaf chain
(the transformation given to ``packed``): the same float32 arithmetic per element
with the same scalars. Two compiled programs may still round a multiply-add
differently (XLA:CPU contracts a*b+c into an FMA per loop it emits, see
benchmarks/README.md, "Two programs"), so where that was measured the
comparison is to 1 ulp (MindSpore Adam, MXNet RMSProp here); which is why
`create` does not pack by default.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform._fused import FusedState
from gradxform._state_paths import map_states, with_fields
from gradxform.pieces._step import StepState

BIG = (260, 260)  # 67,600 elements: above 2**16, a buffer of its own

PARAMS = {
    "dense": {"kernel": jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 4),
              "bias": jnp.asarray([0.1, -0.2, 0.3, 0.05], jnp.float32)},
    "big": jnp.sin(jnp.arange(BIG[0] * BIG[1], dtype=jnp.float32)).reshape(BIG) * 0.1,
    "emb": jnp.linspace(0.5, -0.5, 10, dtype=jnp.float32).reshape(5, 2),
    "half": {"w": jnp.linspace(-0.3, 0.4, 7, dtype=jnp.float16), "b": jnp.asarray([0.2, -0.1], jnp.float16)},
    "scale": jnp.asarray([1.5, -0.7], jnp.float32),
}


def _grads(k, master):
    def one(p):
        g = 0.3 * jnp.sin(3.0 * p.astype(jnp.float32) + k) + 0.05 * (k + 1)
        return g if (master and p.dtype == jnp.float16) else g.astype(p.dtype)
    return jax.tree.map(one, PARAMS)


def _run(tx, master, steps=3, jit=True):
    state = tx.init(PARAMS)
    step = (lambda g, s, p: tx.update(g, s, p))
    step = jax.jit(step) if jit else step
    params = PARAMS
    for k in range(steps):
        u, state = step(_grads(k, master), state, params)
        params = gradxform.apply_updates(params, u)
    return params, state


def _equal(a, b, ulp=False):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype, jax.tree_util.keystr(path)
        if ulp:
            np.testing.assert_allclose(x.astype(np.float32), y.astype(np.float32), rtol=1e-6, atol=1e-7,
                                       err_msg=jax.tree_util.keystr(path))
        else:
            assert np.array_equal(x, y, equal_nan=True), f"{jax.tree_util.keystr(path)}: {x} != {y}"


CASES = [
    # (name, kwargs, bit-identical to the per-leaf chain on this tree on CPU)
    ("adam", dict(learning_rate=0.01, wd=0.01, lr_mult={"dense/*": 2.0}, wd_mult={"*bias": 0.0},
                  multi_precision=True), True),
    ("sgd", dict(learning_rate=0.05, momentum=0.9, wd=1e-3, lr_mult={"emb": 0.5}, multi_precision=True), True),
    ("rmsprop", dict(learning_rate=0.01, lr_mult={"scale": 3.0}, multi_precision=True), False),
    ("mindspore.adam", dict(learning_rate=0.01, weight_decay=0.01), False),
]


@pytest.mark.parametrize("name,kwargs,exact", CASES, ids=[c[0] for c in CASES])
def test_plain_tx_packs_and_matches_the_per_leaf_chain(name, kwargs, exact):
    plain = gradxform.create(name, **kwargs)
    tx = gradxform.fused.packed(plain)
    assert gradxform.fused.bit_exact(tx) and not gradxform.fused.why_not_fused(tx)
    master = bool(kwargs.get("multi_precision"))
    got, got_state = _run(tx, master)
    ref, ref_state = _run(plain, master)
    assert not isinstance(got_state, FusedState)  # the state keeps its per-leaf form
    _equal((got, got_state), (ref, ref_state), ulp=not exact)
    # and the numbers of `fused` in the Trainer's layout (same groups, but the state
    # flat: another program, so to 1 ulp where the per-leaf one differs too)
    ftx = gradxform.fused(tx, max_leaf_size=1 << 16)
    fstate = ftx.init(PARAMS)
    step = jax.jit(lambda g, s, p: ftx.update(g, s, p))
    params = PARAMS
    for k in range(3):
        u, fstate = step(_grads(k, master), fstate, params)
        params = gradxform.apply_updates(params, u)
    _equal(got, params, ulp=not exact)
    _equal(got_state, gradxform.fused.unflatten_state(tx, fstate), ulp=not exact)


def test_eager_call_groups_by_the_states_own_numbers():
    # Diverged counts (as migrated from a framework) are concrete outside jit: the
    # groups follow them and the step is the per-leaf one.
    plain = gradxform.create("adam", learning_rate=0.01)
    tx = gradxform.fused.packed(plain)
    state = gradxform.per_leaf_counts(tx.init(PARAMS), PARAMS)

    def bump(_, node):
        return with_fields(node, leaf_counts=node.leaf_counts.at[gradxform.param_names(PARAMS).index("emb")].add(5))

    state = map_states(bump, state, StepState)
    g = _grads(0, False)
    got = tx.update(g, state, PARAMS)
    ref = plain.update(g, state, PARAMS)
    _equal(got, ref)
    # traced, the groups are those of a fresh init: the step refuses this state
    with pytest.raises(Exception, match="per-leaf numbers differ inside a group"):
        jax.block_until_ready(jax.jit(lambda g, s, p: tx.update(g, s, p))(g, state, PARAMS))
    # an update_mask keeps the per-leaf path, which handles any counts
    mask = jax.tree.map(lambda _: jnp.asarray(True), PARAMS)
    got = jax.jit(lambda g, s, p: tx.update(g, s, p, update_mask=mask))(g, state, PARAMS)
    ref = jax.jit(lambda g, s, p: plain.update(g, s, p, update_mask=mask))(g, state, PARAMS)
    _equal(got, ref)


def test_not_bit_exact_chains_stay_per_leaf():
    plain = gradxform.create("nadam", learning_rate=0.01)
    tx = gradxform.fused.packed(plain)  # per-leaf values spread per element
    assert not gradxform.fused.bit_exact(tx)
    got = _run(tx, False, steps=2)
    ref = _run(plain, False, steps=2)
    _equal(got, ref)
