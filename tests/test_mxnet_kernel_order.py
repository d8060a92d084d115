"""MXNet 1.9.1's SGD and Adam kernels to the last bit (tests/fixtures/mxnet/kernel_order.npz,
tools/mxnet_kernel_order_golden.py: MXNet's own optimizers through its Updater, as
``gluon.Trainer`` calls them; 6 steps over 1,024 weights, gradients e^-10..e^10).

The pip ``libmxnet.so`` rounds every product of its optimizer kernels (no FMA), while XLA
contracts a jitted ``a * b + c`` into one: `gradxform.mxnet._kernels` writes each kernel's
products rounded (`gradxform._rounding.rounded`) in the kernel's order of operations, and
Adam's ``lr * (sqrt(1 - b2**t) / (1 - b1**t))`` (MXNet's Python, float64) in float32 pairs
before its one rounding to float32.

Tolerance: none where XLA contracts multiply-adds (XLA:CPU): the jitted step is MXNet's,
weight for weight, at every step, and so are the momentum and moments after the last step.
Elsewhere 4 ulps (`kernel_order.assert_kernel_trajectory`).
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform
from kernel_order import assert_kernel_trajectory, run_jitted

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "mxnet", "kernel_order.npz"))
CONFIGS = json.loads(str(FIXTURE["configs"]))


def _state_fields(name):
    """MXNet's state arrays, in its order, as gradxform's state names them."""
    opt, kw = CONFIGS[name]
    if opt == "adam":
        return ("mu", "nu")
    return ("trace",) if kw.get("momentum", 0) > 0 else ()


def _run(name, fused=False):
    opt, kw = CONFIGS[name]
    tx = gradxform.create(f"mxnet.{opt}", **kw)
    return run_jitted(gradxform.fused(tx) if fused else tx, FIXTURE["w0"], FIXTURE["g"], with_state=True)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_jitted_step_is_mxnets_kernel(name):
    ours, state = _run(name)
    assert_kernel_trajectory(ours, FIXTURE[f"w_{name}"], name)
    for k, field in enumerate(_state_fields(name)):  # the momentum / moments after the last step
        found = [np.asarray(v["w"]) for _, v in optax.tree_utils.tree_get_all_with_path(state, field)]
        assert len(found) == 1, (field, len(found))
        assert_kernel_trajectory(found[0][None], FIXTURE[f"s{k}_{name}"][None], f"{name} {field}")


@pytest.mark.parametrize("name", ["sgd_mom_wd_clip", "sgd_wd", "adam_wd_clip"])
def test_fused_step_is_mxnets_kernel(name):
    """`gradxform.fused` keeps the kernels' arithmetic (one buffer, the same numbers)."""
    assert_kernel_trajectory(_run(name, fused=True)[0], FIXTURE[f"w_{name}"], f"{name} fused")


def test_the_bias_corrected_rate_is_mxnets_float64_number():
    """``lr * (sqrt(1 - b2**t) / (1 - b1**t))`` in float64, rounded once (MXNet's ``Adam.update``),
    from float32 pairs inside a jitted program, t up to 20,000 (the float32 formula misses it
    at 20-40% of the steps)."""
    from gradxform._hyper import hyper_residual
    from gradxform.mxnet._kernels import _bias_corrected_rate

    def pair(v):
        return jnp.float32(v), hyper_residual(v)

    t = np.arange(1, 20001, dtype=np.int32)
    for lr, b1, b2 in [(0.001, 0.9, 0.999), (0.1, 0.9, 0.999), (0.003, 0.8, 0.99), (3e-4, 0.95, 0.9999)]:
        rate = jax.jit(jax.vmap(lambda t: _bias_corrected_rate(pair(lr), pair(b1), pair(b2), t)))
        want = np.asarray([np.float32(lr * (np.sqrt(1 - b2 ** float(k)) / (1 - b1 ** float(k)))) for k in t])
        np.testing.assert_array_equal(np.asarray(rate(jnp.asarray(t))), want, err_msg=f"lr {lr}, betas {b1} {b2}")
