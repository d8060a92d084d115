"""Writes tests/fixtures/mindspore/adam_kernel_order.npz: MindSpore 2.10's own ``nn.Adam``
(plain and ``use_nesterov``), ``nn.LazyAdam`` and ``nn.AdamOffload`` on the CPU, 6 steps over
1,024 float32 weights whose gradients span e^-10..e^10 (and, for plain Adam, one gradient of 3e19
at step 3: ``g * g`` overflows there in MindSpore's kernel, the moment becomes inf, then NaN).

What it pins is the kernels' order of operations, the last bits: ``P.Adam`` writes
``m += (g - m) * (1 - beta1)``, ``AdamNoUpdateParam`` ``m = m * beta1 + (1 - beta1) * g``
(tests/test_mindspore_adam_kernel.py). 1,024 weights split over MindSpore's CPU threads into
chunks that are multiples of 8, so every weight takes the kernels' AVX loop; their scalar tail
computes ``sqrt`` in double, an artifact of where a chunk ends.

    OMP_NUM_THREADS=2 /work/venvs/mindspore/bin/python tools/mindspore_adam_kernel_golden.py
"""
from __future__ import annotations

import os

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "mindspore", "adam_kernel_order.npz")
N, STEPS, LR = 1024, 6, 0.01
CONFIGS = {  # name -> the optimizer
    "adam": lambda p: nn.Adam([p], learning_rate=LR),
    "adam_nesterov": lambda p: nn.Adam([p], learning_rate=LR, use_nesterov=True),
    "lazy_adam": lambda p: nn.LazyAdam([p], learning_rate=LR),
    "adam_offload": lambda p: nn.AdamOffload([p], learning_rate=LR),
}


def main():
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(N).astype(np.float32)
    grads = (rng.standard_normal((STEPS, N)) * np.exp(rng.uniform(-10, 10, (STEPS, N)))).astype(np.float32)
    out = {"w0": w0, "g": grads, "lr": np.float32(LR)}
    for name, make in CONFIGS.items():
        g_run = grads.copy()
        if name == "adam":
            g_run[2, 7] = np.float32(3e19)
            out["g_adam"] = g_run
        p = Parameter(Tensor(w0.copy()), name="w")
        opt = make(p)
        ws = []
        for t in range(STEPS):
            opt((Tensor(g_run[t]),))
            ws.append(p.asnumpy().copy())
        out[f"w_{name}"] = np.stack(ws)
    np.savez_compressed(OUT, **out)
    print("wrote", OUT, {k: v.shape for k, v in out.items()})


if __name__ == "__main__":
    main()
