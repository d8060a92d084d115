"""Rules with per-leaf reductions or per-leaf schedules, per leaf and fused
(segment reductions over the flat buffers, `gradxform.pieces._segments`).

    python benchmarks/bench_reductions.py                    # ResNet-50 shapes and 400 small leaves
    python benchmarks/bench_reductions.py --sets resnet50 --steps 10

For each rule: the median step time and the compile time of a jitted,
donated step, per leaf and fused with flat parameters (`FlatTree`), and
their ratio. This is why `Trainer` fuses these rules only with
``fused=True``: the fused step compiles far faster but, on XLA CPU, sums
rows more slowly than it sums whole leaves. Benchmarks are not tests.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

import gradxform  # noqa: E402
from bench_step import SETS, make_tree, time_jax, tx_step  # noqa: E402



def small400_shapes() -> dict:
    """200 dense layers of 64: 400 leaves, 0.83 M parameters."""
    return {f"layer{i:03d}/{k}": s for i in range(200) for k, s in (("kernel", (64, 64)), ("bias", (64,)))}


SETS = dict(SETS, small400=small400_shapes)

RULES = {
    "mindspore.lamb": dict(learning_rate=1e-3, weight_decay=1e-2),
    "mindspore.lars(momentum)": None,  # built below: LARS wraps another optimizer
    "mxnet.nadam": dict(learning_rate=1e-3, wd=1e-4),
    "mxnet.lbsgd lars": dict(learning_rate=0.1, momentum=0.9, warmup_strategy="lars", batch_scale=2),
}


def build(rule):
    if rule == "mindspore.lars(momentum)":
        inner = gradxform.create("mindspore.momentum", learning_rate=0.1, momentum=0.9, weight_decay=1e-4)
        return gradxform.mindspore.lars(inner)
    name = rule.split()[0]
    return gradxform.create(name, **RULES[rule])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="resnet50,small400")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {args.steps} timed steps")
    for set_name in args.sets.split(","):
        shapes = SETS[set_name]()
        params, grads = make_tree(shapes, 0, 0.05), make_tree(shapes, 1, 1e-3)
        print(f"\n== {set_name}: {len(shapes)} leaves")
        print("| rule | per leaf ms | fused ms (x per leaf) | Trainer layout ms (x per leaf) "
              "| compile per leaf s | compile fused s |")
        print("|---|---|---|---|---|---|")
        for rule in RULES:
            tx = build(rule)
            copy = jax.tree.map(lambda x: x + 0, params)
            leaf = time_jax(tx_step(tx, gradxform.apply_updates), copy, grads, tx.init(params), args.steps)
            fused = {}
            for label, limit in (("all", None), ("trainer", 1 << 16)):  # Trainer: leaves > 2**16 alone
                ftx = gradxform.fused(tx, strict=True, max_leaf_size=limit)
                state = ftx.init(params)
                flat_p, flat_g = gradxform.fused.ravel(params, state), gradxform.fused.ravel(grads, state)
                fused[label] = time_jax(tx_step(ftx, gradxform.apply_updates), flat_p, flat_g, state,
                                        args.steps)
                del flat_p, flat_g, state
                gc.collect()
            a, t = fused["all"], fused["trainer"]
            print(f"| {rule} | {leaf[0] * 1e3:.2f} | {a[0] * 1e3:.2f} ({a[0] / leaf[0]:.2f}x) | "
                  f"{t[0] * 1e3:.2f} ({t[0] / leaf[0]:.2f}x) | {leaf[1]:.2f} | {a[1]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
