"""gradxform.pieces.centralize_gradients: the mean over all axes but the
output axis is removed (exact to float32 rounding, atol 1e-6); selected
leaves of fewer than 2 dims raise; MindSpore's selection rule (rank >= 2 and
shape[1] % 16 == 0, the rest of the group skipped) through its optimizers."""
import jax.numpy as jnp
import numpy as np
import pytest

from gradxform.pieces import centralize_gradients
from trajectories import run_jitted


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


def test_selected_vector_raises_with_path_and_dense_kernels_are_centralized():
    tx = centralize_gradients()
    with pytest.raises(ValueError, match=r"2 or more dimensions.*params\['dense'\]\['bias'\]"):
        tx.init({"dense": {"bias": jnp.zeros(3)}, "conv": jnp.zeros((2, 2, 3))})
    g = np.arange(12, dtype=np.float32).reshape(3, 4)
    out, _ = tx.update(jnp.asarray(g), tx.init(g))
    np.testing.assert_allclose(np.asarray(out), g - g.mean(axis=1, keepdims=True), atol=1e-6)


def _ms_gc_reference(w0, gs, lr, mu, gc_of):
    """float64 MindSpore Momentum with gradients_centralization
    (optimizer.py ``_tensor_apply_grad_centralization``): rank >= 2 and
    shape[1] % 16 == 0 -> g - mean(g, axes 1..), else g unchanged."""
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for g in gs:
        for k in w:
            gg = g[k].astype(np.float64)
            if gc_of(k) and gg.ndim >= 2 and gg.shape[1] % 16 == 0:
                gg = gg - gg.mean(axis=tuple(range(1, gg.ndim)), keepdims=True)
            v[k] = mu * v[k] + gg
            w[k] = w[k] - lr * v[k]
    return w


def test_mindspore_group_gc_skips_what_mindspore_skips():
    """The seed's own example (``'conv' in name``, conv biases included) works:
    conv.bias (rank 1) and a kernel with 3 input channels are skipped, the
    16-channel kernel and a (8, 32) dense kernel are centralized (the case
    momentum_groups_gc has no golden: MindSpore's CPU has no Centralization
    kernel). float64 transcription, 6 steps, rtol 1e-5 / atol 1e-6."""
    from gradxform import mindspore as M

    shapes = {"conv1/weight": (4, 16, 1, 2), "conv1/bias": (4,), "conv2/weight": (4, 3, 2, 2),
              "conv3/weight": (8, 32), "bn/gamma": (4,)}
    rng = np.random.default_rng(3)
    w0 = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    gs = [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()} for _ in range(6)]
    tx = M.momentum(0.1, 0.9, groups=[{"params": lambda n: "conv" in n, "grad_centralization": True},
                                      {"params": lambda n: "conv" not in n}])
    p, _ = run_jitted(tx, w0, gs)
    want = _ms_gc_reference(w0, gs, 0.1, 0.9, lambda k: "conv" in k)
    for k in shapes:
        np.testing.assert_allclose(np.asarray(p[k]), want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # and the skip is real: without GC conv2 (3 channels) and conv1/bias are the same
    plain = _ms_gc_reference(w0, gs, 0.1, 0.9, lambda k: False)
    for k in ("conv1/bias", "conv2/weight", "bn/gamma"):
        np.testing.assert_allclose(want[k], plain[k], rtol=0, atol=0)
    assert np.max(np.abs(want["conv1/weight"] - plain["conv1/weight"])) > 1e-3
    assert np.max(np.abs(want["conv3/weight"] - plain["conv3/weight"])) > 1e-3


def test_pytree_of_flags_selects():
    params = {"a": jnp.ones((2, 2, 2)), "b": jnp.ones(4)}
    tx = centralize_gradients({"a": True, "b": False})
    out, _ = tx.update(params, tx.init(params))
    np.testing.assert_allclose(np.asarray(out["a"]), 0.0, atol=1e-7)
    with pytest.raises(ValueError, match="flags"):
        centralize_gradients([True]).init(params)


@pytest.mark.parametrize("axis", [-3, 2])
def test_output_axis_bounds_are_python_s(axis):
    """Any axis Python indexing takes (``-ndim <= axis < ndim``) keeps that axis."""
    g = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    tx = centralize_gradients(output_axis=axis)
    out, _ = tx.update(jnp.asarray(g), tx.init(g))
    others = tuple(a for a in range(3) if a != axis % 3)
    np.testing.assert_allclose(np.asarray(out), g - g.mean(axis=others, keepdims=True), atol=1e-6)


@pytest.mark.parametrize("axis", [-4, 3])
def test_output_axis_out_of_range_is_refused(axis):
    with pytest.raises(ValueError, match=f"output_axis={axis}"):
        centralize_gradients(output_axis=axis).init(np.zeros((2, 3, 4), np.float32))
