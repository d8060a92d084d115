#!/usr/bin/env python
"""MindSpore 2.10 FTRL goldens with l1 > 0, recorded through the kernel that
MindSpore's GPU and sparse kernels share (gradxform follows it).

Run with the MindSpore venv (never imported by tests):

    /work/venvs/mindspore/bin/python tools/mindspore_ftrl_goldens.py [--only CASE ...]

Why not ``opt(dense_grads)`` as tools/mindspore_goldens.py does: with a dense
gradient ``nn.FTRL`` calls ``ApplyFtrl``, whose CPU kernel
(plugin/device/cpu/kernel/apply_ftrl_cpu_kernel.cc) writes
``linear ? l1 : -l1`` for ``sign(linear) * l1``, i.e. ``(l1 - u)`` once
``|u| > l1`` (recorded as ftrl_l1_l2). The GPU ``ApplyFtrl``
(cuda_ops/ftrl_impl.cu), the GPU ``SparseApplyFtrl`` (cuda_ops/sparse_ftrl_impl.cu)
and the CPU ``SparseApplyFtrl``/``FusedSparseFtrl`` (sparse_apply_ftrl_cpu_kernel.cc)
all use ``sign(u) * l1 - u``. So this script feeds ``nn.FTRL`` each gradient
as a ``RowTensor`` over *every* row (indices = arange(shape[0])): nn.FTRL then
runs its sparse branch (``_tensor_run_opt_with_sparse`` -> CPU SparseApplyFtrl),
with the same weight decay and loss-scale steps as for a dense gradient
(optimizer.py ``_tensor_apply_decay_with_sparse``, ``tensor_grad_scale_with_sparse``;
the index dedup is the identity here). Every element is updated every step,
so the trajectory is the dense one under the GPU kernel's rule.
GRAPH_MODE: PYNATIVE cannot take a RowTensor as an input of the jit construct.

Same npz layout as tools/mindspore_goldens.py (``g_<t>_<i>`` is the dense
gradient, the RowTensor's values), written to tests/goldens/mindspore/ so that
tests/test_mindspore_parity.py's table-driven golden test reads them.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mindspore_goldens as base  # noqa: E402
import mindspore as ms  # noqa: E402
from mindspore import nn, Tensor  # noqa: E402
from mindspore.common.sparse_tensor import RowTensorInner  # noqa: E402

ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")


class AllRows(nn.Cell):
    """``opt(tuple of RowTensor(arange(rows), g, shape))`` inside a graph."""

    def __init__(self, opt, shapes):
        super().__init__()
        self.opt = opt
        self.shapes = tuple(tuple(s) for s in shapes)

    def construct(self, indices, values):
        rows = ()
        for k in range(len(self.shapes)):
            rows = rows + (RowTensorInner(indices[k], values[k], self.shapes[k]),)
        return self.opt(rows)


def run_case(case, build, kwargs_meta, groups=None, names=base.NAMES, shapes=base.SHAPES, steps=base.STEPS):
    w0, params = base.make_params(names, shapes)
    grads = base.make_grads(shapes, steps)
    opt = build(params)
    order = [p.name for p in opt.parameters]
    shape_of = dict(zip(names, shapes))
    step = AllRows(opt, [shape_of[n] for n in order])
    out = {"w0_%d" % i: w for i, w in enumerate(w0)}
    for t in range(steps):
        by_name = dict(zip(names, grads[t]))
        idx = tuple(Tensor(np.arange(shape_of[n][0], dtype=np.int32)) for n in order)
        step(idx, tuple(Tensor(by_name[n]) for n in order))
        for i, (g, p) in enumerate(zip(grads[t], params)):
            out["g_%d_%d" % (t, i)] = g
            out["w_%d_%d" % (t, i)] = p.asnumpy().copy()
    state, state_names = base.collect_state(opt, names)
    out.update(state)
    meta = {
        "optimizer": type(opt).__name__, "kwargs": kwargs_meta, "lr_schedule": None, "names": list(names),
        "shapes": [list(s) for s in shapes], "groups": groups, "dtype": "float32", "steps": steps,
        "framework": "mindspore", "framework_version": ms.__version__, "state_names": state_names,
        "param_order": order,
        "mode": "GRAPH_MODE, CPU, each gradient fed as RowTensor(arange(shape[0]), g, shape) -> SparseApplyFtrl",
        "seeds": {"params": 0, "grads": 1, "rng": "numpy.default_rng standard_normal; grads *0.5"},
        "notes": "sparse branch over all rows: the sign(u)*l1 - u rule of the GPU ApplyFtrl and of the CPU/GPU "
                 "SparseApplyFtrl; the CPU dense ApplyFtrl uses l1 - u (ftrl_l1_l2)",
    }
    out["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(os.path.join(base.OUT, case + ".npz"), **out)


def cases():
    def build_with(kw, spec=None):
        def build(params):
            if spec is None:
                return nn.FTRL(params, **kw)
            by = {p.name: p for p in params}
            return nn.FTRL([dict(g, params=[by[n] for n in g["params"]]) for g in spec], **kw)
        return build

    C = {}
    kw = dict(learning_rate=0.05, initial_accum=0.2, l1=0.01, l2=0.02, lr_power=-0.3)  # ftrl_l1_l2's
    C["ftrl_sparse_l1_l2"] = dict(build=build_with(kw), kwargs_meta=kw)
    kw = dict(learning_rate=0.05, l1=0.05, l2=0.01, weight_decay=0.01, loss_scale=2.0)  # lr_power -0.5: sqrt path
    C["ftrl_sparse_l1_wd_ls"] = dict(build=build_with(kw), kwargs_meta=kw)
    spec = [{"params": ["dense.weight", "bn.gamma"], "weight_decay": 0.05}, {"params": ["dense.bias"]}]
    kw = dict(learning_rate=0.1, l1=0.02, l2=0.01, lr_power=-0.4, weight_decay=0.01, loss_scale=2.0)
    C["ftrl_sparse_groups"] = dict(build=build_with(kw, spec), kwargs_meta=kw, groups=spec)
    return C


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.chdir(base._TMP)
    for name, spec in cases().items():
        if a.only and name not in a.only:
            continue
        run_case(name, **spec)  # a failure raises: never fake a golden
        print("ok  ", name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
