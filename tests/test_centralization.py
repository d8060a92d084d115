"""gradxform.pieces.centralize_gradients: the mean over all axes but the
output axis is removed (exact to float32 rounding, atol 1e-6); non-kernels raise."""
import jax.numpy as jnp
import numpy as np
import pytest

from gradxform.pieces import centralize_gradients


def test_subtracts_mean_over_all_but_output_axis():
    rng = np.random.default_rng(0)
    g = {"k": rng.standard_normal((4, 3, 2, 2)).astype(np.float32), "b": np.ones(3, np.float32)}
    tx = centralize_gradients(lambda name, shape: name == "k")
    out, _ = tx.update({k: jnp.asarray(v) for k, v in g.items()}, tx.init(g))
    want = g["k"] - g["k"].mean(axis=(1, 2, 3), keepdims=True)
    np.testing.assert_allclose(np.asarray(out["k"]), want, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(out["b"]), g["b"])
    np.testing.assert_allclose(np.asarray(out["k"]).mean(axis=(1, 2, 3)), 0.0, atol=1e-6)


def test_output_axis_last_for_flax_kernels():
    g = np.arange(24, dtype=np.float32).reshape(2, 3, 1, 4)
    tx = centralize_gradients(output_axis=-1)
    out, _ = tx.update(jnp.asarray(g), tx.init(g))
    np.testing.assert_allclose(np.asarray(out), g - g.mean(axis=(0, 1, 2), keepdims=True), atol=1e-6)


def test_non_convolution_parameter_raises_with_path():
    tx = centralize_gradients()
    with pytest.raises(ValueError, match=r"convolution kernels.*params\['dense'\]\['bias'\]"):
        tx.init({"dense": {"bias": jnp.zeros(3)}, "conv": jnp.zeros((2, 2, 3))})


def test_pytree_of_flags_selects():
    params = {"a": jnp.ones((2, 2, 2)), "b": jnp.ones(4)}
    tx = centralize_gradients({"a": True, "b": False})
    out, _ = tx.update(params, tx.init(params))
    np.testing.assert_allclose(np.asarray(out["a"]), 0.0, atol=1e-7)
    with pytest.raises(ValueError, match="flags"):
        centralize_gradients([True]).init(params)
