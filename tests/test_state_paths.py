"""The one walker over optimizer states (gradxform._state_paths)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.tree_util import DictKey, GetAttrKey, SequenceKey

import gradxform as gx
from gradxform._state_paths import (find_states, get_path, map_param_trees, map_states, replace_fields,
                                    state_paths)
from gradxform.migrate._state import Slot, fill_state
from gradxform.mindspore._adaptive import MindSporeFtrlState
from gradxform.mxnet._adaptive import MXNetFtrlState
from gradxform.pieces._moments import TraceState
from gradxform.pieces._step import StepState

PARAMS = {"b": jnp.zeros((3,)), "a": jnp.ones((2, 2))}


def _state():
    return gx.create("mxnet.sgd", learning_rate=0.1, momentum=0.9).init(PARAMS)


def test_find_by_class_with_paths():
    state = _state()
    found = state_paths(state, StepState)
    assert len(found) == 1
    path, node = found[0]
    assert isinstance(node, StepState)
    assert get_path(state, path) is node
    assert all(isinstance(k, (GetAttrKey, DictKey, SequenceKey)) for k in path)
    both = find_states(state, (StepState, TraceState))
    assert len(both) == 2 and any(n is node for n in both)


def test_map_states_keeps_untouched_subtrees():
    state = _state()
    same = map_states(lambda _, n: n, state)
    assert same is state
    bumped = map_states(lambda _, n: n._replace(count=n.count + 5), state, StepState)
    (step,) = find_states(bumped, StepState)
    assert int(step.count) == 5
    assert jax.tree.structure(bumped) == jax.tree.structure(state)


def test_writing_counts_writes_only_counts():
    state = _state()
    ((path, step),) = state_paths(state, StepState)
    counts = jnp.asarray([3, 7], jnp.int32)  # a per-leaf vector: an entry per leaf
    (new,) = find_states(replace_fields(state, {path: {"leaf_counts": counts}}), StepState)
    assert [int(c) for c in np.asarray(new.leaf_counts)] == [3, 7]
    assert new.count is step.count and StepState._fields == ("hyper", "lr_mult", "leaf_counts", "count")


def test_fill_state_slots_name_the_class():
    state = _state()
    out = fill_state(state, PARAMS, {}, {Slot(StepState, "leaf_counts"): np.asarray([2, 9], np.int32)},
                     who="t", hint="")
    (step,) = find_states(out, StepState)
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [2, 9]
    with pytest.raises(gx.migrate.MigrateError, match="MXNetFtrlState.z"):
        fill_state(state, PARAMS, {Slot(MXNetFtrlState, "z"): [None, None]}, {}, who="t", hint="")


def test_ftrl_states_are_distinct():
    assert MXNetFtrlState is not MindSporeFtrlState
    assert MXNetFtrlState.__name__ != MindSporeFtrlState.__name__
    ms = gx.create("mindspore.ftrl").init(PARAMS)
    assert find_states(ms, MindSporeFtrlState) and not find_states(ms, MXNetFtrlState)


def test_map_param_trees():
    state = _state()
    zeroed = map_param_trees(lambda t: jax.tree.map(jnp.zeros_like, t), jax.tree.structure(PARAMS), state)
    (trace,) = find_states(zeroed, TraceState)
    assert all(float(jnp.sum(x)) == 0 for x in jax.tree.leaves(trace.trace))
