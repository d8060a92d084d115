"""MXNet family against golden trajectories written by MXNet 1.9.1 itself.

The goldens (tests/goldens/mxnet, written by tools/mxnet_goldens.py) drive
``mx.optimizer.get_updater`` with three parameters for 20 steps and record the
weights after every step. Tolerances:
* float32: rtol 1e-5 with atol 1e-6 at every step (atol for values near 0).
  MXNet does part of its scalar arithmetic in float64 on the host (Adam's
  bias-corrected lr) and orders some sums differently; that costs a few ulp.
* float16 with multi_precision: within one float16 ulp (rtol 1e-3): the
  float32 master copies agree to ~1e-7, so only a rounding tie can differ.
* float16 without multi_precision: MXNet rounds every kernel op to half, XLA
  may keep excess precision inside a fusion; rtol 1e-2 after 20 steps.
"""
from __future__ import annotations

import re

import jax
import numpy as np
import pytest

import gradxform as gx
from goldens_io import cases, load
from goldens_io import meta as golden_meta
import quick_compile

CASES = cases("mxnet")


def build(meta):
    kwargs = dict(meta["kwargs"])
    sched = meta.get("scheduler")
    if sched:
        kwargs["lr_scheduler"] = getattr(gx.lr_scheduler, sched["type"])(**sched["kwargs"])
    if meta["idx2name"]:
        kwargs["param_idx2name"] = dict(enumerate(meta["names"]))
        by_index = {n: i for i, n in enumerate(meta["names"])}
        # MXNet resolves name-keyed multipliers through idx2name only.
        if meta["lr_mult"]:
            kwargs["lr_mult"] = {by_index[k]: v for k, v in meta["lr_mult"].items()}
        if meta["wd_mult"]:
            kwargs["wd_mult"] = {by_index[k]: v for k, v in meta["wd_mult"].items()}
    return gx.create(meta["optimizer"], **kwargs)


def tolerance(meta):
    if meta["dtype"] == "float16":
        return dict(rtol=1e-3, atol=1e-3) if meta["kwargs"].get("multi_precision") else dict(rtol=1e-2, atol=1e-2)
    return dict(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_matches_mxnet(path):
    meta, w0, grads, expected = load(path)
    tx = build(meta)
    params = [jax.numpy.asarray(w) for w in w0]
    if meta.get("warnings"):  # MXNet's float16 warning, word for word
        with pytest.warns(UserWarning, match=re.escape(meta["warnings"][0])):
            state = tx.init(params)
    else:
        state = tx.init(params)

    def step(params, state, grads):
        updates, state = tx.update(grads, state, params)
        return gx.apply_updates(params, updates), state

    if "wd_rescale_clip" in path.stem or "fp16" in path.stem:
        step = jax.jit(step)  # the compiled step users run is checked on these
    else:  # within the tolerances above: a quick compile, cheaper than 20 steps op by op
        step = quick_compile.jit(step)

    for t, g in enumerate(grads):
        params, state = step(params, state, [jax.numpy.asarray(x) for x in g])
        for i, (got, want) in enumerate(zip(params, expected[t])):
            assert got.dtype == want.dtype
            np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64),
                                       err_msg=f"{path.stem}: step {t + 1}, {meta['names'][i]}",
                                       **tolerance(meta))


NAME_MULTS_IGNORED = [p for p in CASES
                      if (lambda m: not m["idx2name"] and (m["lr_mult"] or m["wd_mult"]))(golden_meta(p))]


@pytest.mark.parametrize("path", NAME_MULTS_IGNORED, ids=[p.stem for p in NAME_MULTS_IGNORED])
def test_name_keyed_multipliers_without_idx2name(path):
    """These goldens were recorded with name-keyed lr_mult/wd_mult and no
    param_idx2name: MXNet ignores them silently (``build`` leaves them out, and the
    trajectory above matches). Under the recorded configuration gradxform refuses
    the names its parameters do not have, saying which."""
    meta = load(path)[0]
    assert len(NAME_MULTS_IGNORED) == 4
    kwargs = dict(meta["kwargs"], lr_mult=meta["lr_mult"], wd_mult=meta["wd_mult"])
    with pytest.raises(ValueError, match=r"lr_mult: 'dense0_bias' matches no parameter"):
        gx.create(meta["optimizer"], **kwargs).init([jax.numpy.asarray(w) for w in load(path)[1]])
