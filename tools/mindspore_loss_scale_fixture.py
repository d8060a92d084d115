"""Writes tests/fixtures/mindspore/loss_scale/: a MindSpore 2.10 run of nn.Momentum through
``TrainOneStepWithLossScaleCell`` with ``DynamicLossScaleUpdateCell(4096, 2, 3)``, its loss
multiplied by 1e38 at steps 4, 5 and 11 (overflows: skipped, the scale backed off), a training
checkpoint saved after step 7 (``step7.ckpt``: the weights, the optimizer's moments, global_step,
``scale_sense`` and the cell's counters), and ``run.npz``: the scale after every step and the
weights after steps 8-14, what a resume from the checkpoint must reproduce.

On CPU MindSpore 2.10's cell takes the Ascend overflow path (NPUGetFloatStatusV2, no CPU kernel);
the subclass below points it at MindSpore's own isfinite path, the rest of the cell unchanged.

    OMP_NUM_THREADS=1 /work/venvs/mindspore/bin/python tools/mindspore_loss_scale_fixture.py
"""
from __future__ import annotations

import os

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn
from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "mindspore", "loss_scale")
STEPS, SAVE_AT, OVERFLOW = 14, 7, {4: 1e38, 5: 1e38, 11: 1e38}


def data():
    r = np.random.RandomState(0)
    x, y = r.randn(16, 4).astype(np.float32), r.randn(16, 3).astype(np.float32)
    init = {"fc1.weight": (r.randn(8, 4) * 0.5).astype(np.float32), "fc1.bias": (r.randn(8) * 0.1).astype(np.float32),
            "fc2.weight": (r.randn(3, 8) * 0.5).astype(np.float32), "fc2.bias": (r.randn(3) * 0.1).astype(np.float32)}
    return x, y, init


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.relu = nn.Dense(4, 8), nn.Dense(8, 3), nn.ReLU()

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class WithLoss(nn.Cell):
    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net, self.loss = net, nn.MSELoss()

    def construct(self, x, y, f):
        return self.loss(self.net(x), y) * f


class CpuLossScaleCell(nn.TrainOneStepWithLossScaleCell):
    def get_overflow_status(self, status, compute_output):
        return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)


def main() -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    x, y, init = data()
    net = Net()
    for p in net.trainable_params():
        p.set_data(Tensor(init[p.name]))
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    train = CpuLossScaleCell(WithLoss(net), opt, scale_sense=nn.DynamicLossScaleUpdateCell(4096, 2, 3))
    train.set_train()
    scales, after = [], {}
    os.makedirs(OUT, exist_ok=True)
    for step in range(1, STEPS + 1):
        train(Tensor(x), Tensor(y), Tensor(np.float32(OVERFLOW.get(step, 1.0))))
        scales.append(float(train.scale_sense.asnumpy()))
        if step == SAVE_AT:
            ms.save_checkpoint(train, os.path.join(OUT, f"step{SAVE_AT}.ckpt"))
        if step > SAVE_AT:
            after.update({f"{p.name}/{step}": p.asnumpy().copy() for p in net.trainable_params()})
    np.savez(os.path.join(OUT, "run.npz"), x=x, y=y, scales=np.asarray(scales, np.float32),
             overflow_steps=np.asarray(sorted(OVERFLOW)), save_at=SAVE_AT, steps=STEPS, **after)
    print("scales", scales)


if __name__ == "__main__":
    main()
