"""Issue 37 item 3: every optimizer's state grows with the leaves by its rule's own buffers only.

A field holding one number per leaf (step counts, multipliers, group slots, Paddle's beta powers)
is one 1-D array with an entry per leaf (``per_leaf_fields``), never a tree of one-element arrays.
Checked on `init` at 8 and 16 leaves for every registered optimizer: the state gains exactly one
array per extra leaf for each subtree shaped like the parameters (moments, master weights;
MindSpore AdaFactor's row and column factors are such subtrees, shape (1,) for a vector
parameter as MindSpore keeps them), and nothing else. The tree form gained 2 to 10 arrays per
leaf for 33 of the 49 optimizers. `tools/count_leaf_scalars.py` prints the figures.
"""
import warnings

import jax
import jax.numpy as jnp
import pytest

import cases
from gradxform._state_paths import is_leaf_vector, map_param_shaped, state_paths


def _tree(n: int):
    return {f"p{i:02d}": jnp.linspace(0.5, 1.5, 3, dtype=jnp.float32) * (i + 1) for i in range(n)}


def _init(name: str, n: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cases.create(name).init(_tree(n))


@pytest.mark.parametrize("name", cases.names())
def test_state_grows_by_the_rules_own_buffers_only(name):
    small, big = _init(name, 8), _init(name, 16)
    shaped = []
    # the subtrees shaped like the parameters, a declared per-leaf field (of either form) not among them
    map_param_shaped(big, jax.tree.structure(_tree(16)), per_leaf=lambda _, x: x,
                     param_tree=lambda t: shaped.append(t) or t)
    grown = len(jax.tree.leaves(big)) - len(jax.tree.leaves(small))
    assert grown == 8 * len(shaped), (name, grown, len(shaped))
    for _, node in state_paths(big):  # each declared per-leaf field is one vector, when held (None/(): not)
        for field in getattr(type(node), "per_leaf_fields", ()):
            value = getattr(node, field)
            held = not (value is None or (isinstance(value, tuple) and not value))
            assert not held or is_leaf_vector(node, field, 16), (name, type(node).__name__, field)
