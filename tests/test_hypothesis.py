"""Property-based tests over random pytrees, for every registered optimizer.

Trees: nested dicts and lists of 0-d, zero-size and small arrays in float16,
bfloat16 and float32 (float64 too when x64 is on). For each optimizer
(tests/cases.py row): init and update never crash, updates keep the
parameters' structure, shapes and dtypes, jit agrees with op-by-op, and a zero
gradient with zero weight decay leaves float32 parameters unchanged where
the row says so (float16 without master weights follows the frameworks'
float16 kernels, where epsilon underflows and 0/0 is NaN). Example counts are small: every new tree is a new compile.
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cases
import gradxform as gx
import quick_compile

SHAPES = [(), (0,), (3,), (2, 3), (1, 0, 2)]
DTYPES = [jnp.float16, jnp.bfloat16, jnp.float32] + ([jnp.float64] if jax.config.jax_enable_x64 else [])
# jit vs op-by-op: XLA may fuse (and round) low-precision arithmetic differently.
TOL = {jnp.dtype(jnp.float16): (1e-2, 1e-2), jnp.dtype(jnp.bfloat16): (5e-2, 5e-2)}

leaf_spec = st.tuples(st.sampled_from(SHAPES), st.sampled_from(DTYPES))
tree_spec = st.recursive(
    leaf_spec,
    lambda kids: st.one_of(st.dictionaries(st.sampled_from("abcd"), kids, min_size=1, max_size=3),
                           st.lists(kids, min_size=1, max_size=3)),
    max_leaves=4)
# Every optimizer sees NASTY (all dtypes, a 0-d, a zero-size, nested dict and
# list) plus a few random trees; ~30 optimizers x 4 trees stays under a minute.
EXAMPLES = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NASTY = {"a": ((2, 3), jnp.float16), "b": [((), jnp.float32), ((0,), jnp.bfloat16)], "c": ((3,), jnp.bfloat16)}


def is_spec(x):
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], tuple)


def build(spec, seed, offset=0.0):
    leaves, treedef = jax.tree.flatten(spec, is_leaf=is_spec)
    rng = np.random.default_rng(seed)
    arrays = [jnp.asarray(rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape) + offset, dtype)
              for shape, dtype in leaves]
    return jax.tree.unflatten(treedef, arrays)


def signature(tree):
    return jax.tree.map(lambda x: (x.shape, x.dtype), tree)


def assert_close(a, b, case):
    def one(x, y):
        rtol, atol = TOL.get(x.dtype, (case.rtol, case.atol))
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)
    jax.tree.map(one, a, b)


@pytest.mark.parametrize("name", cases.names())
@EXAMPLES
@given(spec=tree_spec, seed=st.integers(0, 2 ** 16))
@example(spec=NASTY, seed=7)
def test_random_trees(name, spec, seed):
    case = cases.case(name)
    params, grads = build(spec, seed), build(spec, seed + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 without multi_precision warns, as MXNet does
        tx = cases.create(name)
        state = tx.init(params)
    updates, new_state = tx.update(grads, state, params)
    assert signature(updates) == signature(params)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    assert signature(jax.tree.leaves(new_state)) == signature(jax.tree.leaves(state))
    new_params = gx.apply_updates(params, updates)
    assert signature(new_params) == signature(params)

    jit_updates, jit_state = quick_compile.jit(tx.update)(grads, state, params)  # a tolerance
    assert_close(jit_updates, updates, case)
    assert_close(jit_state, new_state, case)

    if case.zero_grad_fixed:
        # In float32: without master weights a float16 step is a float16 kernel,
        # where epsilon=1e-8 underflows to 0 and a zero gradient gives 0/0 = NaN
        # (as in MXNet's and MindSpore's float16 kernels).
        params = jax.tree.map(lambda p: p.astype(jnp.float32), params)
        tx0 = cases.create(name, **case.zero_wd)
        s0 = tx0.init(params)
        zeros = jax.tree.map(jnp.zeros_like, params)
        u0, s0 = tx0.update(zeros, s0, params)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(
            np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=0, atol=case.zero_grad_atol),
            gx.apply_updates(params, u0), params)
