"""Parameter selection by Gluon regex, against what MXNet 1.9.1's Gluon selects
(issue 28): ``Block.collect_params(select)`` is ``re.compile(select).match(name)``,
anchored at the start only. tests/goldens/mxnet/collect_params_select.json records,
for a net with parameters ``dense0_*``, ``mydense0_*``, ``bn_*``, ``head_dense1_*``,
which names Gluon picks for each pattern (tools/mxnet_goldens.py collect_params);
the expected selections here come from that file, never from gradxform.

Checked: `gradxform.Selector` picks the same names, and an MXNet SGD step with
``wd_mult={pattern: 0.0}`` (what ``collect_params(pattern).setattr('wd_mult', 0.0)``
does in Gluon) decays exactly the parameters Gluon leaves decayed. A pattern Gluon
selects nothing with ('bias': anchored, no parameter starts with it) is refused by
gradxform as a typo, naming it. Float32 against float32: rtol 1e-6.
"""
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform._selectors import Selector

with open(os.path.join(os.path.dirname(__file__), "goldens", "mxnet", "collect_params_select.json")) as f:
    GOLD = json.load(f)
NAMES = GOLD["names"]
PATTERNS = sorted(GOLD["selected"])


def test_golden_covers_anchoring():
    sel = GOLD["selected"]
    assert GOLD["mxnet_version"] == "1.9.1"
    assert sel["dense0_.*"] == ["dense0_bias", "dense0_weight"]  # not mydense0_*, not head_dense1_*
    assert sel["bias"] == []  # re.match: anchored at the start


@pytest.mark.parametrize("pattern", PATTERNS)
def test_selector_picks_what_gluon_collect_params_picks(pattern):
    picked = [n for n, on in zip(NAMES, Selector(pattern).select(NAMES)) if on]
    assert picked == GOLD["selected"][pattern]


@pytest.mark.parametrize("pattern", [p for p in PATTERNS if GOLD["selected"][p]])
def test_wd_mult_by_gluon_pattern_decays_what_gluon_decays(pattern):
    rng = np.random.default_rng(0)
    params = {n: jnp.asarray(rng.standard_normal(3).astype(np.float32)) for n in NAMES}
    grads = {n: jnp.asarray(rng.standard_normal(3).astype(np.float32)) for n in NAMES}
    lr, wd = np.float32(0.1), np.float32(0.05)
    tx = gx.create("sgd", learning_rate=float(lr), wd=float(wd), wd_mult={pattern: 0.0})
    u, _ = tx.update(grads, tx.init(params), params)
    off = set(GOLD["selected"][pattern])
    for n in NAMES:  # MXNet SGD: w -= lr * (g + wd * wd_mult * w)
        w, g = np.asarray(params[n]), np.asarray(grads[n])
        want = -lr * (g + (np.float32(0.0) if n in off else wd) * w)
        np.testing.assert_allclose(np.asarray(u[n]), want, rtol=1e-6, err_msg=n)


def test_a_pattern_gluon_selects_nothing_with_is_refused_by_name():
    params = {n: jnp.zeros(2) for n in NAMES}
    with pytest.raises(ValueError, match="'bias'"):
        gx.create("sgd", learning_rate=0.1, wd_mult={"bias": 0.0}).init(params)
