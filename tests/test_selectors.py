"""Selections by the names users of Flax see (nnx's Variables, linen's
``params`` collection): `gradxform.param_names` and `gradxform._selectors.Selector`."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen, nnx

import gradxform
from gradxform._selectors import (ParamName, Selector, as_names, assign_slots, check_keys, describe_names,
                                  multipliers, names_of)


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


@pytest.mark.parametrize("key, want", [
    ("params/layers_0/kernel", {"layers_0/kernel"}),  # a path copied from the variables
    ("layers_0/kernel", {"layers_0/kernel"}),
    ("params/*/bias", {"layers_0/bias", "layers_1/bias"}),
])
def test_linen_params_prefix_in_the_key_selects_in_the_params_subtree(key, want):
    # a TrainState holds variables['params']: its names have no params/ prefix
    params = linen.Sequential([linen.Dense(3), linen.Dense(1)]).init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    frozen = _frozen_where(params, gradxform.create("sgd", learning_rate=0.1, lr_mult={key: 0.0}))
    assert {n for n, f in frozen.items() if f} == want


def test_only_a_literal_params_prefix_is_read_off_the_key():
    # a regex that happens to match "params/..." is not read against prefixed names
    names = ["dense/kernel", "proj/kernel"]
    assert Selector("^p.*").select(names).tolist() == [False, True]
    assert Selector("params/proj/*").select(names).tolist() == [False, True]


def test_a_key_matching_nothing_still_says_so_under_linen():
    variables = {"params": {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}}
    tx = gradxform.create("sgd", learning_rate=0.1, lr_mult={"dense/kernl": 0.0})
    with pytest.raises(ValueError, match="matches no parameter"):
        tx.init(variables)
    assert Selector("dense/kernel").select(gradxform.param_names(variables)).tolist() == [False, True]


# --- the selection rules one by one, as the module docstring states them (issue 28: mutants of
# gradxform/_selectors.py that no test saw; docs/mutation.md). Plain names, no optimizer: fast.

NAMES = ["enc/dense0_bias", "enc/dense0_weight", "head/bias", "head/kernel"]


class _Param:
    """A parameter object as MindSpore/Gluon hand them out: only a ``.name``."""

    def __init__(self, name):
        self.name = name


class _CallableParam(_Param):
    """A parameter object that is also callable: still a parameter object, not a predicate."""

    def __call__(self, *args):
        return True


def test_parameter_objects_select_their_name_exactly():
    assert Selector(_Param("head/bias")).select(NAMES).tolist() == [False, False, True, False]
    assert Selector(_CallableParam("head/bias")).select(NAMES).tolist() == [False, False, True, False]
    assert not Selector(_CallableParam("head/bias")).is_predicate


def test_a_param_name_as_key_reads_as_the_string_it_is():
    """`ParamName` is a ``str`` with ``.name``: as a key it is read as the string (a glob here),
    not as a parameter object's exact name."""
    assert Selector(ParamName("*/bias")).select(NAMES).tolist() == [False, False, True, False]


def test_predicate_without_shapes_and_single_name_call():
    sel = Selector(lambda n: n.name.endswith("bias"))
    assert sel.select(NAMES).tolist() == [True, False, True, False]
    assert sel("head/bias") is True and sel("head/kernel") is False
    assert Selector("*/bias")("head/bias") is True


def test_linen_prefix_read_when_other_collections_are_present():
    names = ["batch_stats/bn/mean", "params/bn/scale", "params/dense/kernel"]
    assert Selector("dense/kernel").select(names).tolist() == [False, False, True]


def test_describe_names_shows_eight():
    nine = [f"p{i}" for i in range(9)]
    assert describe_names(nine) == str(nine[:8]) + " ..."
    assert describe_names(nine[:8]) == str(nine[:8])


def test_check_keys_skips_what_it_cannot_check():
    for mapping in (None, {}, lambda n: 1.0):
        assert check_keys(NAMES, mapping, "lr_mult") is None
    assert check_keys([], {"typo": 0.0}, "lr_mult") is None  # optax's params placeholder: no names
    with pytest.raises(ValueError, match="'typo' matches no parameter"):
        check_keys(NAMES, {"typo": 0.0}, "lr_mult")


def _slots(groups, **kw):
    return assign_slots(NAMES, groups, unmatched=lambda gid, s: f"unmatched {gid}",
                        overlap=lambda n, a, b: f"overlap {n} {a} {b}", **kw).tolist()


def test_assign_slots_unselected_is_minus_one_and_overlap_with_group_zero():
    assert _slots([(0, "head/*"), (1, ".*weight")]) == [-1, 1, 0, 0]
    with pytest.raises(ValueError, match="unmatched 1"):
        _slots([(0, "head/*"), (1, "nothing/*")])
    with pytest.raises(ValueError, match="overlap head/bias 0 1"):
        _slots([(0, "head/*"), (1, "*/bias")])


def test_assign_slots_refuses_a_predicate_that_selects_nothing():
    # MindSpore refuses an empty group; a predicate written for dotted names selects nothing here
    with pytest.raises(ValueError, match="unmatched 1"):
        _slots([(0, "head/*"), (1, lambda x: "head.bias" in x.name)])
    with pytest.raises(ValueError, match="unmatched 0"):
        _slots([(0, lambda n: False)])
    assert _slots([(0, "head/*"), (1, lambda x: x.name.endswith("weight"))]) == [-1, 1, 0, 0]


def test_assign_slots_checks_nothing_without_names():
    # optax's params placeholder: no names to select from, nothing refused
    assert assign_slots([], [(0, lambda n: False), (1, "typo")], unmatched=lambda *a: "unmatched",
                        overlap=lambda *a: "overlap").tolist() == []


def test_multipliers_default_callable_and_bounds():
    assert multipliers(NAMES, {"head/*": 0.5}).tolist() == [1.0, 1.0, 0.5, 0.5]  # Gluon's lr_mult default 1
    assert multipliers(NAMES, None).tolist() == [1.0] * 4
    assert multipliers(NAMES, lambda n: 2.0 if "bias" in n else 3.0).tolist() == [2.0, 3.0, 2.0, 3.0]
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="finite number >= 0"):
            multipliers(NAMES, {"head/bias": bad})


@pytest.mark.parametrize("f", [names_of, as_names])
def test_names_of_lists_only(f):
    objs = [_Param("a"), _Param("b")]
    assert f(objs) == ["a", "b"] and f(tuple(objs)) == ["a", "b"]
    for not_a_list in ([], set(objs), (o for o in objs), {"a": objs[0]}.values(), "ab"):
        assert f(not_a_list) is None, not_a_list
    assert f([objs[0], 3]) is None  # one entry without a name: not a list of parameters
