"""MindSpore's Adam kernels to the last bit (tests/fixtures/mindspore/adam_kernel_order.npz,
tools/mindspore_adam_kernel_golden.py: MindSpore 2.10's own nn.Adam, LazyAdam, AdamOffload).

Tolerance: none where XLA contracts a multiply-add into an FMA, as MindSpore's AVX kernels
(compiled with contraction) and its CUDA kernels do; the jitted step is then MindSpore's, weight
for weight, the overflow of ``g * g`` at |g| = 3e19 included (inf, then NaN, as in MindSpore).
Where XLA does not contract (another backend or CPU), 4 ulps (the rounding of the two fused
multiply-adds per moment, compounded over 6 steps): asserted for every element that is finite.
"""
import os

import numpy as np
import pytest

import gradxform
from kernel_order import assert_kernel_trajectory, run_jitted

FIXTURE = np.load(os.path.join(os.path.dirname(__file__), "fixtures", "mindspore", "adam_kernel_order.npz"))
CONFIGS = {
    "adam": ("mindspore.adam", {}),
    "adam_nesterov": ("mindspore.adam", {"use_nesterov": True}),
    "lazy_adam": ("mindspore.lazy_adam", {}),
    "adam_offload": ("mindspore.adam_offload", {}),
}


def _run(name):
    factory, kw = CONFIGS[name]
    tx = gradxform.create(factory, learning_rate=float(FIXTURE["lr"]), **kw)
    return run_jitted(tx, FIXTURE["w0"], FIXTURE["g_adam"] if name == "adam" else FIXTURE["g"])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_jitted_step_is_mindspores_kernel(name):
    assert_kernel_trajectory(_run(name), FIXTURE[f"w_{name}"], name)


def test_the_overflow_of_g_squared_is_mindspores():
    """|g| = 3e19: ``g * g`` is inf in MindSpore's kernel, so the moment is inf (the weight keeps
    its value: m / inf = 0), then NaN at the next step; ``(1 - b2) * g * g`` would be finite."""
    theirs = FIXTURE["w_adam"]
    assert np.isfinite(theirs[1, 7]) and theirs[2, 7] == theirs[1, 7] and np.isnan(theirs[3, 7])
    ours = _run("adam")
    assert ours[2, 7] == ours[1, 7] and np.isnan(ours[3, 7])
