"""`gradxform.migrate._state`, the writing of a framework file's values into ``tx.init(params)``,
checked by hand against its docstrings (issue 28 item 2: the mutants of the module that the
readers' resume tests do not reach: a slot's key and class, ambiguity, the dtype rules, the step
counts kept shared, the bounds of a step count and of a value, the messages of `at_boundary`,
`resolve_order`, `warn_hyper_mismatch`). Pure host-side code on tiny trees: eager, no jit.

Expected values come from the docstrings and from the int32 range of gradxform's counters, never
from the code under test."""
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform._ranges import UNIT_HALF_OPEN
from gradxform._state_paths import find_states
from gradxform.migrate import MigrateError
from gradxform.migrate._state import (MAX_COUNT, Slot, at_boundary, checked_count, checked_value, fill_state,
                                      has_slot, resolve_order, warn_hyper_mismatch)
from gradxform.pieces._moments import TraceState
from gradxform.pieces._step import StepState

PARAMS = {"a": jnp.zeros(3), "b": jnp.ones((2, 2))}
TRACE = Slot(TraceState, "trace")
COUNT, LEAF_COUNTS = Slot(StepState, "count"), Slot(StepState, "leaf_counts")


def sgd_state(params=PARAMS):
    return gx.create("sgd", learning_rate=0.1, momentum=0.9).init(params)


def fill(state, per_leaf=None, whole=None, params=PARAMS):
    return fill_state(state, params, per_leaf or {}, whole or {}, who="reader", hint="use sgd.")


class SubTrace(TraceState):
    """A subclass: holds a ``trace`` but is not a TraceState slot's class."""


def test_a_slot_is_its_class_its_field_its_key_and_the_params_structure():
    state = sgd_state()
    assert has_slot(state, PARAMS, TRACE)
    assert has_slot(state, PARAMS, Slot(TraceState, "trace", "momentum"))  # the node holds that hyperparameter
    assert not has_slot(state, PARAMS, Slot(TraceState, "trace", "beta1"))  # ... and not this one
    assert not has_slot(state, PARAMS, Slot(TraceState, "mu"))  # no such field
    assert not has_slot(state, {"a": jnp.zeros(3)}, TRACE)  # per leaf (the default): the params' structure
    assert has_slot(state, {"a": jnp.zeros(3)}, COUNT, per_leaf=False)  # a whole field: any structure
    sub = (state[0], tuple(SubTrace(*n) if type(n) is TraceState else n for n in state[1]))
    assert not has_slot(sub, PARAMS, TRACE)  # "a piece's state NamedTuple class (the class itself)"


def test_fill_state_names_a_missing_or_ambiguous_slot_and_a_bad_value():
    state = sgd_state()
    with pytest.raises(MigrateError, match=r"reader: tx's state has no TraceState.trace \(holding 'beta1'\), "
                                           r"which the file has values for; use sgd\."):
        fill(state, {Slot(TraceState, "trace", "beta1"): [None, None]})
    twice = (state, state)  # two TraceStates of the params' structure
    with pytest.raises(MigrateError, match=r"tx's state has 2 places for TraceState.trace; cannot tell"):
        fill(twice, {TRACE: [None, None]})
    with pytest.raises(MigrateError, match=r"TraceState.trace of parameter 'a' holds NaN or Inf"):
        fill(state, {TRACE: [np.array([1.0, np.nan, 1.0], np.float32), None]})  # one element is enough
    with pytest.raises(MigrateError, match=r"StepState.count has dtype <U1 in the file; tx expects int32"):
        fill(state, whole={COUNT: np.array("3")})


def test_fill_state_casts_to_the_fields_dtype_and_warns_only_when_it_rounds():
    """"whole[slot]: one array replacing the field (cast to the field's dtype)"; a float value is
    rounded (with a warning naming the caller's line) only when the file's float is wider."""
    state = sgd_state()
    for value in (np.int64(7), np.float64(7.0)):
        (step,) = find_states(fill(state, whole={COUNT: value}), StepState)
        assert step.count.dtype == jnp.int32 and int(step.count) == 7
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float16 into float32 loses nothing: no warning
        (trace,) = find_states(fill(state, {TRACE: [np.full(3, 0.5, np.float16), None]}), TraceState)
    assert trace.trace["a"].dtype == jnp.float32 and np.all(np.asarray(trace.trace["a"]) == 0.5)
    with pytest.warns(UserWarning, match=r"TraceState.trace of parameter 'a' is float64 in the file and "
                                         r"float32 in tx; it is rounded") as rec:
        fill(state, {TRACE: [np.full(3, 0.1, np.float64), None]})
    assert [w.filename for w in rec] == [__file__]  # the caller's line, not the reader's


def test_step_counts_stay_shared_where_the_file_has_one_value_for_every_leaf():
    """StepState.leaf_counts None means every leaf's count is ``count``: kept None when the file's
    per-leaf counts all equal the count written beside them, a tree of them otherwise."""
    state = sgd_state()
    (step,) = find_states(fill(state, whole={COUNT: np.int32(5), LEAF_COUNTS: np.array([5, 5])}), StepState)
    assert step.leaf_counts is None and int(step.count) == 5
    per_leaf = fill(state, whole={COUNT: np.int32(5), LEAF_COUNTS: np.array([5, 4])})
    (step,) = find_states(per_leaf, StepState)
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [5, 4]
    # a state that already keeps a count per leaf keeps its structure, whatever the values
    (step,) = find_states(fill(per_leaf, whole={COUNT: np.int32(3), LEAF_COUNTS: np.array([3, 3])}), StepState)
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [3, 3]
    for s in (state, per_leaf):
        with pytest.raises(MigrateError, match=r"has shape \(3,\) in the file; tx expects one value per "
                                               r"parameter \(2,\)"):
            fill(s, whole={LEAF_COUNTS: np.array([1, 1, 1])})
    # a bare array as the params (one leaf): the count is still the whole field
    bare = jnp.zeros(3)
    (step,) = find_states(fill(sgd_state(bare), whole={COUNT: np.int32(4)}, params=bare), StepState)
    assert int(step.count) == 4


def test_checked_count_is_an_integer_in_the_int32_range_minus_one_update():
    # "the next update must still fit gradxform's int32 counters"
    assert MAX_COUNT == np.iinfo(np.int32).max - 1
    for value, want in ((0, 0), (MAX_COUNT, MAX_COUNT), (np.int64(7), 7), (np.array([7]), 7), (np.array(9), 9)):
        assert checked_count(value, "n") == want
    for bad, match in ((MAX_COUNT + 1, r"n is 2147483647; a step count lies in \[0, 2147483646\]"),
                       (-1, "n is -1; a step count lies"), (True, "a step count is an integer"),
                       (2.0, "a step count is an integer"), (np.array([1, 2]), "a step count is an integer")):
        with pytest.raises(MigrateError, match=match):
            checked_count(bad, "n")


def test_checked_value_is_a_number_judged_exactly_against_its_range():
    for value, want in ((0.5, 0.5), (np.float32(0.25), 0.25), (np.array([0.25]), 0.25), (0, 0.0),
                        (1 - 1e-10, 1 - 1e-10)):  # in [0, 1) as the number it is (float32 would read 1.0)
        assert checked_value(value, "v", UNIT_HALF_OPEN) == want
    for bad, match in ((True, "v is True; expected a number"), ("x", "expected a number"),
                       (np.array([0.1, 0.2]), "expected a number"), (1.0, r"v is 1.0; a run only reaches values in")):
        with pytest.raises(MigrateError, match=match):
            checked_value(bad, "v", UNIT_HALF_OPEN)


def test_at_boundary_names_the_file_once_and_turns_any_failure_into_a_migrate_error():
    def reader(message=None, error=None):
        @at_boundary("r")
        def read(source, params):
            if error is not None:
                raise error
            raise MigrateError(message)
        return read

    def message(source, **kw):
        with pytest.raises(MigrateError) as err:
            reader(**kw)(source, {"a": 1})
        return str(err.value)

    assert message("f.bin", message="r: boom") == "r('f.bin'): boom"
    assert message("f.bin", message="r:boom") == "r('f.bin'): boom"
    assert message("f.bin", message="r('f.bin'): boom") == "r('f.bin'): boom"  # named already: as it is
    assert message({"state": 1}, message="other words") == "other words"  # no file to name
    assert message("f.bin", error=KeyError("k")).startswith("r('f.bin'): the file is corrupt or does not fit")


def test_resolve_order_gives_each_framework_index_its_leaf():
    params = {"a": 0, "b": 0, "c": 0}
    assert resolve_order(params, None, None, "r") == [0, 1, 2]
    assert resolve_order(params, ["c", "a", "b"], None, "r") == [2, 0, 1]
    with pytest.raises(MigrateError, match=r"r\(order=...\): 'a' is listed twice"):
        resolve_order(params, ["a", "b", "c", "a"], None, "r")


def test_warn_hyper_mismatch_compares_as_float32_to_rtol_1e_6():
    state = sgd_state()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the same float32; a name tx does not hold; a value the file lacks (None): no warning
        warn_hyper_mismatch(state, {"learning_rate": 0.1, "beta1": 0.5, "momentum": None}, "r")
    with pytest.warns(UserWarning, match=r"r: tx's hyperparameters differ from the saved run's \(learning_rate: "
                                         r"tx 0.1 vs file 0.100001\)") as rec:
        warn_hyper_mismatch(state, {"learning_rate": 0.1 * (1 + 1e-5)}, "r")
    assert [w.filename for w in rec] == [__file__]
