"""MXNet 1.9.1's SGD and Adam kernels to the last bit (tests/fixtures/mxnet/kernel_order.npz,
tools/mxnet_kernel_order_golden.py: MXNet's own optimizers through its Updater, as
``gluon.Trainer`` calls them).

The pip ``libmxnet.so`` rounds every product of its optimizer kernels (no FMA), while XLA
contracts a jitted ``a * b + c`` into one: `gradxform.mxnet._kernels` writes each kernel's
products rounded (`gradxform._rounding.rounded`) in the kernel's order of operations, and
Adam's ``lr * sqrt(1 - b2**t) / (1 - b1**t)`` (MXNet's Python, float64) in double-float
arithmetic before its one rounding to float32.

Tolerance: none where XLA contracts multiply-adds (XLA:CPU): the jitted step is MXNet's,
weight for weight, at every step. Elsewhere 4 ulps.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "mxnet", "kernel_order.npz"))
CONFIGS = json.loads(str(FIXTURE["configs"]))
STATE_FIELDS = {"sgd": ("trace",), "adam": ("mu", "nu")}  # MXNet's state arrays, in its order


def _xla_contracts() -> bool:
    """Whether jitted ``a * b + c`` rounds once here (an FMA): where the unrounded
    arithmetic would differ from MXNet's."""
    a, b, c = np.float32(1 + 2 ** -12), np.float32(1 - 2 ** -12), np.float32(-1)
    fused = np.float32(np.float64(a) * np.float64(b) + np.float64(c))  # -2**-24, exact
    return float(jax.jit(lambda a, b, c: a * b + c)(a, b, c)) == float(fused)


def _run(name, fused=False):
    opt, kw = CONFIGS[name]
    tx = gradxform.create(f"mxnet.{opt}", **kw)
    if fused:
        tx = gradxform.fused(tx)
    params = {"w": jnp.asarray(FIXTURE["w0"])}
    state = tx.init(params)

    @jax.jit
    def step(params, state, g):
        updates, state = tx.update({"w": g}, state, params)
        return optax.apply_updates(params, updates), state

    out = []
    for g in FIXTURE["g"]:
        params, state = step(params, state, jnp.asarray(g))
        out.append(np.asarray(params["w"]))
    return np.stack(out), state


def _check(name, ours, theirs):
    if _xla_contracts():
        for t in range(len(ours)):
            np.testing.assert_array_equal(ours[t], theirs[t], err_msg=f"{name}, step {t + 1}")
    else:
        np.testing.assert_array_max_ulp(ours, theirs, maxulp=4)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_jitted_step_is_mxnets_kernel(name):
    ours, state = _run(name)
    _check(name, ours, FIXTURE[f"w_{name}"])
    fields = STATE_FIELDS[CONFIGS[name][0]] if CONFIGS[name][1].get("momentum", 1) else ()
    for k, field in enumerate(fields):  # the momentum / moments after the last step
        found = [np.asarray(v["w"]) for _, v in optax.tree_utils.tree_get_all_with_path(state, field)]
        assert len(found) == 1, (field, len(found))
        _check(f"{name} {field}", found[0][None], FIXTURE[f"s{k}_{name}"][None])


@pytest.mark.parametrize("name", ["sgd_mom_wd_clip", "adam_wd_clip"])
def test_fused_step_is_mxnets_kernel(name):
    """`gradxform.fused` keeps the kernels' arithmetic (one buffer, the same numbers)."""
    _check(name, _run(name, fused=True)[0], FIXTURE[f"w_{name}"])
