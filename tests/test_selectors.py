"""Selections by the names users of Flax see (nnx's Variables, linen's
``params`` collection): `gradxform.param_names` and `gradxform._selectors.Selector`."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen, nnx

import gradxform
from gradxform._selectors import Selector


class _Net(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(2, 3, rngs=rngs)
        self.l2 = nnx.Linear(3, 1, rngs=rngs)


def _frozen_where(params, tx):
    """Which leaves a step of ``tx`` leaves unchanged (lr_mult 0 there)."""
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    return {name: bool(np.all(np.asarray(u) == 0))
            for name, u in zip(gradxform.param_names(updates), jax.tree.leaves(updates))}


def test_nnx_names_have_no_value_suffix():
    state = nnx.state(_Net(nnx.Rngs(0)), nnx.Param)
    assert gradxform.param_names(state) == ["l1/bias", "l1/kernel", "l2/bias", "l2/kernel"]


@pytest.mark.parametrize("key", ["*/bias", "l1/bias", ".*bias"])
def test_nnx_lr_mult_by_the_names_nnx_users_write(key):
    state = nnx.state(_Net(nnx.Rngs(0)), nnx.Param)
    frozen = _frozen_where(state, gradxform.create("sgd", learning_rate=0.1, lr_mult={key: 0.0}))
    want_frozen = {"l1/bias"} if key == "l1/bias" else {"l1/bias", "l2/bias"}
    assert {n for n, f in frozen.items() if f} == want_frozen


@pytest.mark.parametrize("key, want", [
    ("layers_0/kernel", {"params/layers_0/kernel"}),           # without linen's params/ prefix
    ("params/layers_0/kernel", {"params/layers_0/kernel"}),    # with it
    ("layers_0/*", {"params/layers_0/kernel", "params/layers_0/bias"}),
    ("*/bias", {"params/layers_0/bias", "params/layers_1/bias"}),
])
def test_linen_params_prefix_optional(key, want):
    variables = linen.Sequential([linen.Dense(3), linen.Dense(1)]).init(jax.random.key(0), jnp.ones((1, 2)))
    frozen = _frozen_where(variables, gradxform.create("sgd", learning_rate=0.1, lr_mult={key: 0.0}))
    assert {n for n, f in frozen.items() if f} == want


def test_a_key_matching_nothing_still_says_so_under_linen():
    variables = {"params": {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}}
    tx = gradxform.create("sgd", learning_rate=0.1, lr_mult={"dense/kernl": 0.0})
    with pytest.raises(ValueError, match="matches no parameter"):
        tx.init(variables)
    assert Selector("dense/kernel").select(gradxform.param_names(variables)).tolist() == [False, True]
