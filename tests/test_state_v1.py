"""gradxform._state_v1: matching a file of the tree layout (one entry per leaf of a per-leaf field)
to today's state, where each such field is one vector. The happy path (every registered optimizer's
recorded v1 state loads and continues) is tests/test_state_fixtures.py; here, what is not a v1 file
of the expected tree is refused (None), never matched by a prefix or a count that happens to fit."""
import jax
import jax.numpy as jnp
import numpy as np

import gradxform as gx
from gradxform._state_v1 import v1_plan, v1_stack

PARAMS = {"a": jnp.ones(3), "b": jnp.ones(2)}


def _like():
    """An MXNet SGD state with per-leaf step counts: one per-leaf vector, ``.leaf_counts``."""
    return gx.per_leaf_counts(gx.create("mxnet.sgd", learning_rate=0.1).init(PARAMS), PARAMS)


def _paths(tree):
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _v1_paths(like):
    """The paths a v1 file of ``like`` holds: the counts vector as one entry per leaf."""
    out = []
    for p in _paths(like):
        out += [p + "['a']", p + "['b']"] if p.endswith(".leaf_counts") else [p]
    return out


def test_a_v1_file_maps_each_vector_to_its_leaves_entries_in_order():
    like = _like()
    file_paths = _v1_paths(like)
    plan = v1_plan(file_paths, _paths(like), like)
    assert plan is not None and len(plan) == len(_paths(like))
    at = _paths(like).index(next(p for p in _paths(like) if p.endswith(".leaf_counts")))
    assert [file_paths[i] for i in plan[at]] == [_paths(like)[at] + "['a']", _paths(like)[at] + "['b']"]
    assert v1_plan(_paths(like), _paths(like), like) is None  # today's layout is not v1 (load_state matches it first)


def test_what_is_not_a_v1_file_of_the_tree_is_refused():
    like = _like()
    good = _v1_paths(like)
    vec = next(p for p in _paths(like) if p.endswith(".leaf_counts"))
    shorter = good[:-1]                                   # the last leaf missing: no index past the end
    assert v1_plan(shorter, _paths(like), like) is None
    renamed = [p.replace("hyper", "hyperz") for p in good]  # another field, not a vector's entries
    assert v1_plan(renamed, _paths(like), like) is None
    one_entry = [p for p in good if p != vec + "['b']"]      # a vector of 2 given 1 entry
    assert v1_plan(one_entry, _paths(like), like) is None
    for wrong in (vec + "z['b']", ".other['b']"):          # an entry not under the field's path
        paths = [wrong if p == vec + "['b']" else p for p in good]
        assert v1_plan(paths, _paths(like), like) is None


def test_stacking_takes_only_scalars_in_the_states_dtype():
    np.testing.assert_array_equal(v1_stack([np.asarray(3, np.int32), np.asarray([4], np.int32)], "int32"), [3, 4])
    assert v1_stack([np.asarray(True), np.asarray(False)], "int32").dtype == np.int32  # an old bool flag
    assert v1_stack([np.asarray(1.0), np.zeros(2)], "float32") is None                 # one entry not a scalar
