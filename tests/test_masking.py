"""gradxform.pieces._masking.masked_by_update_mask, through every registered
optimizer: ``update(..., update_mask=m)`` outside the Trainer gives a masked
leaf an update of exactly zero and leaves its per-parameter state as it was,
from the very first step (issue 15 item 9: Adam's bias correction at t = 0
made that update NaN). Exact comparisons (the masked values are selected,
not computed)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cases
import gradxform as gx
from gradxform._state_paths import leaf_vector_fields, map_param_trees, state_paths
from gradxform.pieces import track_step
from gradxform.pieces._masking import masked_by_update_mask
import quick_compile

PARAMS = {"dense": {"kernel": jnp.asarray([[0.5, -1.0], [2.0, 0.25], [-0.75, 1.5]], jnp.float32),
                    "bias": jnp.asarray([0.1, -0.2], jnp.float32)},
          "scale": [jnp.asarray(1.5, jnp.float32)]}
MASK = {"dense": {"kernel": jnp.asarray(True), "bias": jnp.asarray(False)}, "scale": [jnp.asarray(True)]}


def grads(k):
    return jax.tree.map(lambda p, i: jnp.sin(jnp.arange(p.size, dtype=jnp.float32) + 1.7 * i + k).reshape(p.shape),
                        PARAMS, {"dense": {"kernel": 0, "bias": 1}, "scale": [2]})


def _leaf_pairs(new, old, path=("dense", "bias")):
    """(new, old) state arrays of one leaf (default the masked 'dense/bias'),
    from every state subtree shaped like the parameters and every per-leaf
    vector (its entry for that leaf)."""
    pairs = []
    pdef = jax.tree.structure(PARAMS)
    at = gx.param_names(PARAMS).index("/".join(path))
    olds = dict(state_paths(old))
    for p, node in state_paths(new):
        pairs += [(getattr(node, f)[at], getattr(olds[p], f)[at]) for f in leaf_vector_fields(node)
                  if p in olds and f in leaf_vector_fields(olds[p])]

    def grab(n, o):
        pairs.append((n[path[0]][path[1]], o[path[0]][path[1]]))
        return n

    map_param_trees(grab, pdef, new, old)
    return pairs


@pytest.mark.parametrize("name", cases.names())
def test_masked_leaf_update_is_zero_and_its_state_unchanged(name):
    tx = cases.create(name)
    state0 = tx.init(PARAMS)
    # zero updates, a masked state passed through, finiteness: nothing a compiler's rounding moves
    step = quick_compile.jit(lambda g, s, p, m: tx.update(g, s, p, update_mask=m))
    updates, state1 = step(grads(0), state0, PARAMS, MASK)  # the first step: t = 0 for the masked leaf
    assert np.all(np.asarray(updates["dense"]["bias"]) == 0.0), (name, updates["dense"]["bias"])
    for u in jax.tree.leaves(updates):
        assert np.all(np.isfinite(np.asarray(u))), name
    pairs = _leaf_pairs(state1, gx.per_leaf_counts(state0, PARAMS))  # the masked step wrote counts per leaf
    assert pairs, name  # every optimizer keeps some per-parameter state
    for new, old in pairs:
        np.testing.assert_array_equal(np.asarray(new), np.asarray(old), err_msg=name)
    # an unmasked leaf did take its step: a nonzero update or a changed state (LBSGD accumulates
    # first; MXNet Nadam's shared schedule depends on which leaves update, so no equality here)
    moved = np.any(np.asarray(updates["dense"]["kernel"]) != 0.0) or any(
        np.any(np.asarray(n) != np.asarray(o))
        for n, o in _leaf_pairs(state1, gx.per_leaf_counts(state0, PARAMS), ("dense", "kernel")))
    assert moved, name
    # and a later unmasked step is finite for every leaf
    params = gx.apply_updates(PARAMS, updates)
    updates2, _ = quick_compile.jit(tx.update)(grads(1), state1, params)
    for u in jax.tree.leaves(updates2):
        assert np.all(np.isfinite(np.asarray(u))), name


def test_wrapper_alone_zeroes_masked_leaves_and_passes_through_without_a_mask():
    tx = masked_by_update_mask(gx.chain(track_step(0.1), gx.pieces.scale_by_lr()))
    g = grads(0)
    u, s = tx.update(g, tx.init(PARAMS), PARAMS, update_mask=MASK)
    np.testing.assert_array_equal(np.asarray(u["dense"]["bias"]), 0.0)
    np.testing.assert_allclose(np.asarray(u["dense"]["kernel"]), -0.1 * np.asarray(g["dense"]["kernel"]), rtol=1e-6)
    at = gx.param_names(PARAMS).index
    assert int(s[0].leaf_counts[at("dense/bias")]) == 0 and int(s[0].leaf_counts[at("dense/kernel")]) == 1
    u2, _ = tx.update(g, tx.init(PARAMS), PARAMS)
    np.testing.assert_allclose(np.asarray(u2["dense"]["bias"]), -0.1 * np.asarray(g["dense"]["bias"]), rtol=1e-6)
