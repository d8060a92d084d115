"""Bad input gets a clear error at the boundary (gradxform._errors.validated via finalize).

Each test feeds one kind of bad input and checks that the message names the
argument and the pytree path (and both shapes / dtypes where there are two).
"""
from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import cases
import gradxform as gx
from gradxform._errors import check_params, first_difference, validated
from gradxform._optimizer import finalize

PARAMS = {"dense": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros((2,))}, "emb": [jnp.ones((4,))]}
ADAM = gx.create("adam")


def grads_like(params, dtype=None):
    return jax.tree.map(lambda p: jnp.full(p.shape, 0.5, dtype or p.dtype), params)


# -- structures ---------------------------------------------------------------------

def test_missing_gradient_names_the_path():
    g = grads_like(PARAMS)
    del g["dense"]["bias"]
    with pytest.raises(ValueError, match=re.escape("params['dense']['bias'] has no counterpart in updates")):
        ADAM.update(g, ADAM.init(PARAMS), PARAMS)


def test_extra_gradient_names_the_path_and_jit_raises_the_same():
    g = grads_like(PARAMS)
    g["emb"].append(jnp.ones(3))
    msg = re.escape("updates['emb'][1] has no counterpart in params")
    with pytest.raises(ValueError, match=msg):
        ADAM.update(g, ADAM.init(PARAMS), PARAMS)
    with pytest.raises(ValueError, match=msg):
        jax.jit(ADAM.update)(g, ADAM.init(PARAMS), PARAMS)


def test_container_type_mismatch_names_the_node():
    g = grads_like(PARAMS)
    g["emb"] = tuple(g["emb"])
    with pytest.raises(ValueError, match=re.escape("updates['emb'] is a tuple of length 1 but params['emb'] "
                                                   "is a list of length 1")):
        ADAM.update(g, ADAM.init(PARAMS), PARAMS)


def test_first_difference_is_none_for_equal_structures():
    assert first_difference(PARAMS, grads_like(PARAMS), "a", "b") is None
    assert "a['x'] has no counterpart" in first_difference({"x": 1, "y": 2}, {"y": 2}, "a", "b")


# -- leaves -------------------------------------------------------------------------

@pytest.mark.parametrize("bad,dtype", [(jnp.arange(3), "int32"), (jnp.ones(2, bool), "bool")])
def test_integer_and_boolean_leaves_are_an_error_at_init(bad, dtype):
    params = {**PARAMS, "step": bad}
    with pytest.raises(TypeError, match=re.escape(f"init: params['step'] is {dtype}; optimizers update "
                                                  "floating-point leaves only")):
        ADAM.init(params)


def test_integer_gradient_is_an_error_even_without_params():
    g = {"w": jnp.arange(3)}
    with pytest.raises(TypeError, match=re.escape("updates['w'] is int32; gradients must be floating point")):
        gx.create("sgd").update(g, gx.create("sgd").init({"w": jnp.ones(3)}), None)


def test_non_array_leaf_is_an_error():
    with pytest.raises(TypeError, match=re.escape("params['name'] is a str, not an array")):
        ADAM.init({"w": jnp.ones(2), "name": "dense"})


def test_complex_leaves_are_accepted_by_the_checks():
    check_params({"z": jnp.ones(2, jnp.complex64)})


def test_shape_mismatch_names_path_and_both_shapes():
    g = grads_like(PARAMS)
    g["dense"]["kernel"] = jnp.ones((2, 3))
    with pytest.raises(ValueError, match=re.escape("updates['dense']['kernel'] has shape (2, 3) but "
                                                   "params['dense']['kernel'] has shape (3, 2)")):
        ADAM.update(g, ADAM.init(PARAMS), PARAMS)


def test_float16_grads_for_float32_params_suggest_a_fix():
    g = grads_like(PARAMS)
    g["emb"][0] = g["emb"][0].astype(jnp.float16)
    with pytest.raises(TypeError, match=re.escape("updates['emb'][0] is float16 but params there are "
                                                  "float32")) as err:
        ADAM.update(g, ADAM.init(PARAMS), PARAMS)
    assert "multi_precision=True" in str(err.value)


def test_float32_grads_for_float16_params_only_with_master_weights():
    params = {"w": jnp.ones((2,), jnp.float16)}
    g = {"w": jnp.full((2,), 0.5, jnp.float32)}
    tx = gx.create("sgd", learning_rate=0.1, multi_precision=True)
    u, _ = tx.update(g, tx.init(params), params)
    assert u["w"].dtype == jnp.float32          # master-weight updates, as with_master_weights emits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tx = gx.create("sgd", learning_rate=0.1)
        state = tx.init(params)
    with pytest.raises(TypeError, match=re.escape("updates['w'] is float32 but params there are float16")):
        tx.update(g, state, params)


# -- state ------------------------------------------------------------------------

def test_state_from_another_optimizer_is_refused():
    sgd_state = gx.create("sgd", momentum=0.9).init(PARAMS)
    with pytest.raises(ValueError, match="the optimizer state does not come from this optimizer's init") as err:
        ADAM.update(grads_like(PARAMS), sgd_state, PARAMS)
    assert "state" in str(err.value) and "another optimizer" in str(err.value)


def test_state_made_for_other_parameters_names_path_and_shapes():
    other = jax.tree.map(lambda p: jnp.ones(p.shape[:-1] + (p.shape[-1] + 1,)), PARAMS)
    with pytest.raises(ValueError, match=r"state\S*\['dense'\]\['bias'\] is float32\[3\] but this optimizer's "
                                         r"init\(params\) makes float32\[2\]"):
        ADAM.update(grads_like(PARAMS), ADAM.init(other), PARAMS)


def test_state_with_a_wrong_dtype_is_refused():
    state = jax.tree.map(lambda x: x.astype(jnp.float16) if x.dtype == jnp.float32 and x.ndim else x,
                         ADAM.init(PARAMS))
    with pytest.raises(ValueError, match=r"is float16\[\S+\] but this optimizer's init\(params\) makes float32"):
        ADAM.update(grads_like(PARAMS), state, PARAMS)


# -- cost --------------------------------------------------------------------------

def test_checks_run_at_trace_time_only_and_add_nothing_to_the_compiled_step():
    raw = finalize(gx.chain(gx.pieces.track_step(0.1), gx.pieces.scale_by_lr()), validate=False)
    checked = finalize(gx.chain(gx.pieces.track_step(0.1), gx.pieces.scale_by_lr()))
    g, s = grads_like(PARAMS), raw.init(PARAMS)
    a = jax.make_jaxpr(lambda g, s, p: raw.update(g, s, p))(g, s, PARAMS)
    b = jax.make_jaxpr(lambda g, s, p: checked.update(g, s, p))(g, s, PARAMS)
    assert str(a) == str(b)


def test_validated_is_usable_on_any_transformation():
    import optax  # noqa: PLC0415
    tx = validated(optax.adam(1e-3), name="optax.adam")
    with pytest.raises(ValueError, match=re.escape("optax.adam.update: updates['dense']['kernel'] has shape")):
        g = grads_like(PARAMS)
        g["dense"]["kernel"] = jnp.ones(6)
        tx.update(g, tx.init(PARAMS), PARAMS)


# -- hyperparameters out of range ------------------------------------------------------

@pytest.mark.parametrize("name,kwargs,match", [
    ("sgd", dict(momentum=1.5), "mxnet.sgd(momentum=...): momentum must be in [0, 1); got 1.5."),
    ("adam", dict(beta2=1.0), "mxnet.adam(beta2=...): beta2 must be in [0, 1); got 1.0."),
    ("adam", dict(epsilon=0.0), "mxnet.adam(epsilon=...): epsilon must be in (0, inf); got 0.0."),
    ("sgd", dict(wd=-1e-4), "mxnet.sgd(wd=...): wd must be in [0, inf); got -0.0001."),
    ("adagrad", dict(learning_rate=float("nan")), "mxnet.adagrad(learning_rate=...): learning_rate must be in"),
])
def test_hyperparameters_out_of_range_at_construction(name, kwargs, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        gx.create(name, **kwargs)


@pytest.mark.parametrize("name", cases.names())
def test_every_optimizer_refuses_a_negative_learning_rate(name):
    with pytest.raises(ValueError, match="learning_rate must be in"):
        cases.create(name, learning_rate=-1.0)
    state = cases.create(name).init(PARAMS)
    with pytest.raises(ValueError, match=re.escape("set_hyper(learning_rate=...): learning_rate must be in")):
        gx.set_hyper(state, learning_rate=-1.0)


@pytest.mark.parametrize("values,err,match", [
    (dict(momentum=1.0), ValueError, "set_hyper(momentum=...): momentum must be in [0, 1); got 1.0."),
    (dict(momentum=float("inf")), ValueError, "momentum must be in [0, 1)"),
    (dict(wd=-1.0), ValueError, "set_hyper(wd=...): wd must be in [0, inf)"),
    (dict(momentum="fast"), TypeError, "set_hyper(momentum=...): momentum must be a number"),
    (dict(nesterov=1.0), KeyError, "no hyperparameter 'nesterov' in this state"),
    (dict(momentum=np.ones(2)), ValueError, "set_hyper(momentum=...): expected a scalar; got shape (2,)."),
])
def test_set_hyper_checks_on_the_host(values, err, match):
    state = gx.create("sgd", momentum=0.9).init(PARAMS)
    with pytest.raises(err, match=re.escape(match)):
        gx.set_hyper(state, **values)
