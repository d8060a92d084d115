"""MindSpore's and Paddle's CPU kernels to the last bit: MindSpore Momentum, SGD, RMSProp
(plain, centered, momentum + weight decay), Adagrad; Paddle Momentum, SGD, Adamax
(tests/fixtures/{mindspore,paddle}/kernel_order.npz, tools/kernel_order_golden.py: the
frameworks' own optimizer classes on the CPU, 6 steps x 1,024 weights, gradients e^-10..e^10).

Most of these CPU kernels round every product on its own (no fused multiply-add); XLA would
contract ``w - lr * v`` and ``mu * v + g``, so gradxform marks those products
(`gradxform._rounding`). MindSpore's plain RMSProp (nnacl AVX loop) is contracted, as XLA does.
Tolerance: none where XLA contracts (the marks are then what makes the numbers equal; without
them 449 of 1,024 weights differ after one step); 4 ulps elsewhere (tests/kernel_order.py).
Not here: Paddle's CPU Momentum ignores ``rescale_grad`` and MindSpore's CPU ApplyMomentum
``use_nesterov`` (their GPU kernels apply both, and so does gradxform: tools/*_NOTES.md).
"""
import json
import os

import numpy as np
import pytest

import gradxform
from kernel_order import assert_kernel_trajectory, run_jitted

HERE = os.path.join(os.path.dirname(__file__), "fixtures")
FIXTURES = {fw: np.load(os.path.join(HERE, fw, "kernel_order.npz")) for fw in ("mindspore", "paddle")}
CASES = [(fw, name) for fw, z in FIXTURES.items() for name in json.loads(str(z["configs"]))]


@pytest.mark.parametrize("framework,name", CASES)
def test_jitted_step_is_the_cpu_kernels(framework, name):
    z = FIXTURES[framework]
    cls, kw = json.loads(str(z["configs"]))[name]
    tx = gradxform.create(f"{framework}.{cls}", **kw)
    assert_kernel_trajectory(run_jitted(tx, z["w0"], z["g"]), z[f"w_{name}"], f"{framework}.{cls} {kw}")


def test_every_recorded_case_is_checked():
    assert {fw for fw, _ in CASES} == {"mindspore", "paddle"} and all(k.startswith("w_") or k in ("w0", "g", "configs") for z in FIXTURES.values() for k in z.files)
