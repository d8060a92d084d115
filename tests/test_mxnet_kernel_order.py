"""MXNet 1.9.1's SGD, NAG, Signum, Adam, RMSProp, AdaGrad and Ftrl kernels to the last bit
(tests/fixtures/mxnet/kernel_order.npz, tools/mxnet_kernel_order_golden.py: MXNet's own
optimizers through its Updater, as ``gluon.Trainer`` calls them; 6 steps over 1,024 weights
(NAG .. Ftrl: the first 256), gradients e^-10..e^10).

The pip ``libmxnet.so`` rounds every product of its optimizer kernels (no FMA), while XLA
contracts a jitted ``a * b + c`` into one: `gradxform.mxnet._kernels` writes each kernel's
products rounded (`gradxform._rounding.rounded`) in the kernel's order of operations, and
Adam's ``lr * (sqrt(1 - b2**t) / (1 - b1**t))`` (MXNet's Python, float64) in float32 pairs
before its one rounding to float32.

Tolerance: none where XLA contracts multiply-adds (XLA:CPU): the jitted step is MXNet's,
weight for weight, at every step, and so are the momentum and moments after the last step.
Elsewhere 4 ulps (`kernel_order.assert_kernel_trajectory`).

Kernels that write a new weight that is not ``w + u`` (NAG's ``(w - mom) + ...``, sgd_update's
``(1 - lr*wd) * w - ...``, Signum's ``(1 - lr*wd_lh) * w + ...``, Ftrl's closed form) come back
as ``w + (w_new - w)`` through ``apply_updates``: where no float32 ``u`` gives ``w + u ==
w_new`` (a step larger than the weight, a sign change), the weight is that round trip of
MXNet's (here, of 256 weights per step: NAG 0-11, Signum with wd_lh 0-1, Ftrl 2-73, its -0.0s
among them), and the element leaves the comparison from then on (`_assert_round_trip_trajectory`); everywhere else, and
in the state, bit for bit.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform
from kernel_order import assert_kernel_trajectory, run_jitted, xla_contracts

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "mxnet", "kernel_order.npz"))
CONFIGS = json.loads(str(FIXTURE["configs"]))


def _state_fields(name):
    """MXNet's state arrays, in its order, as gradxform's state names them."""
    opt, kw = CONFIGS[name]
    if opt == "adam":
        return ("mu", "nu")
    if opt == "rmsprop":  # n, g, delta
        return ("n", "g", "trace") if kw.get("centered") else ("trace",)
    if opt == "adagrad":
        return ("trace",)  # the history
    if opt == "ftrl":
        return ("z", "n")
    if opt == "nag":
        return ("mom",) if kw.get("momentum", 0) > 0 else ()
    if opt == "signum":  # MXNet stores the negated EMA: compared negated (`_SIGN`)
        return ("trace",)
    return ("trace",) if kw.get("momentum", 0) > 0 else ()


_SIGN = {"signum": -1}  # MXNet's state = _SIGN * gradxform's
# the configurations whose kernel writes w_new, not w + u (see the module's docstring)
ROUND_TRIP = {"nag", "nag_wd_clip", "nag_plain_wd", "nag_plain_wd_clip", "signum_wd", "signum_wd_clip", "ftrl",
              "ftrl_wd_clip"}


def _assert_round_trip_trajectory(ours, theirs, w0, what):
    """MXNet's weights where ``w + (w_new - w)`` (float32) is ``w_new``; elsewhere that round
    trip, after which the element leaves the comparison. Returns the elements kept."""
    kept, prev = np.ones(theirs.shape[1], bool), w0
    exact = (lambda a, b, m: np.testing.assert_array_equal(a[m], b[m], err_msg=what)) if xla_contracts() else \
        (lambda a, b, m: np.testing.assert_array_max_ulp(a[m], b[m], maxulp=4))
    for t in range(len(theirs)):
        reached = prev + (theirs[t] - prev)  # numpy float32, each operation rounded
        missed = kept & (reached != theirs[t])
        exact(ours[t], theirs[t], kept & ~missed)
        exact(ours[t], reached, missed)
        kept &= ~missed
        prev = theirs[t]
    assert kept.mean() > 0.5, (what, kept.sum())
    return kept


def _run(name, fused=False):
    opt, kw = CONFIGS[name]
    tx = gradxform.create(f"mxnet.{opt}", **kw)
    n = FIXTURE[f"w_{name}"].shape[1]  # NAG .. Ftrl: over the first weights only (the fixture's size)
    return run_jitted(gradxform.fused(tx) if fused else tx, FIXTURE["w0"][:n], FIXTURE["g"][:, :n], with_state=True)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_jitted_step_is_mxnets_kernel(name):
    ours, state = _run(name)
    if name in ROUND_TRIP:
        kept = _assert_round_trip_trajectory(ours, FIXTURE[f"w_{name}"], FIXTURE["w0"][:ours.shape[1]], name)
    else:
        kept = slice(None)
        assert_kernel_trajectory(ours, FIXTURE[f"w_{name}"], name)
    for k, field in enumerate(_state_fields(name)):  # the momentum / moments after the last step
        found = [np.asarray(v["w"]) for _, v in optax.tree_utils.tree_get_all_with_path(state, field)]
        assert len(found) == 1, (field, len(found))
        found[0] = found[0] * _SIGN.get(CONFIGS[name][0], 1)
        assert_kernel_trajectory(found[0][None, kept], FIXTURE[f"s{k}_{name}"][None, kept], f"{name} {field}")


@pytest.mark.parametrize("name", ["sgd_mom_wd_clip", "sgd_wd", "adam_wd_clip", "rmsprop_wd_clip",
                                  "rmsprop_centered_wd_clip", "adagrad_wd_clip", "signum", "nag_wd_clip",
                                  "nag_plain_wd", "signum_wd", "ftrl_wd_clip"])
def test_fused_step_is_mxnets_kernel(name):
    """`gradxform.fused` keeps the kernels' arithmetic (one buffer, the same numbers)."""
    ours = _run(name, fused=True)[0]
    if name in ROUND_TRIP:
        _assert_round_trip_trajectory(ours, FIXTURE[f"w_{name}"], FIXTURE["w0"][:ours.shape[1]], f"{name} fused")
    else:
        assert_kernel_trajectory(ours, FIXTURE[f"w_{name}"], f"{name} fused")


def test_the_bias_corrected_rate_is_mxnets_float64_number():
    """``lr * (sqrt(1 - b2**t) / (1 - b1**t))`` in float64, rounded once (MXNet's ``Adam.update``),
    from float32 pairs inside a jitted program, t up to 20,000 and from 2^30 (the float32 formula misses it
    at 20-40% of the steps)."""
    from gradxform._hyper import hyper_residual
    from gradxform.mxnet._kernels import _bias_corrected_rate

    def pair(v):
        return jnp.float32(v), hyper_residual(v)

    # and the loop's top bits: t from 2^30 up to int32's last (a count that large still reads bit 30)
    t = np.concatenate([np.arange(1, 20001), [2 ** 30, 2 ** 30 + 1, 2 ** 31 - 1]]).astype(np.int32)
    # one program for every setting: the pairs are its arguments
    rate = jax.jit(jax.vmap(_bias_corrected_rate, in_axes=(None, None, None, 0)))
    for lr, b1, b2 in [(0.001, 0.9, 0.999), (0.1, 0.9, 0.999), (0.003, 0.8, 0.99), (3e-4, 0.95, 0.9999)]:
        want = np.asarray([np.float32(lr * (np.sqrt(1 - b2 ** float(k)) / (1 - b1 ** float(k)))) for k in t])
        np.testing.assert_array_equal(np.asarray(rate(pair(lr), pair(b1), pair(b2), jnp.asarray(t))), want,
                                      err_msg=f"lr {lr}, betas {b1} {b2}")
