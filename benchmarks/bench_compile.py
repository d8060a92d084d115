"""XLA compile time of one jitted update: per-leaf numbers held per group
(`GroupValues`, what ``init`` makes now) against the same numbers as a
per-leaf vector (``expand_groups`` of that state: the layout before, which
every update still takes), beside optax.adamw.

    python benchmarks/bench_compile.py --leaves 300 --repeat 3
    python benchmarks/bench_compile.py --leaves 300 --opts paddle.nadam,paddle.adamw

Leaves cycle through 7 shapes (as a real model repeats its layers' shapes),
so XLA can share one kernel between leaves of one shape. Each number is the
median over ``--repeat`` of lowering + compiling the same update
(``jax.jit(...).lower(...).compile()`` after ``jax.clear_caches()``).
Not a test: nothing here asserts.
"""
from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import optax

import gradxform
from gradxform._group_values import expand_groups

# optimizer name -> keywords: what each row builds
ROWS = {
    "mxnet.adam+mult": ("mxnet.adam", dict(learning_rate=1e-3, wd=1e-2, lr_mult={"*/b": 2.0}, wd_mult={"*/b": 0.0})),
    "paddle.adam": ("paddle.adam", {}),
    "paddle.adamw": ("paddle.adamw", {}),
    "paddle.adamax": ("paddle.adamax", {}),
    "paddle.lamb": ("paddle.lamb", {}),
    "paddle.nadam": ("paddle.nadam", {}),
    "paddle.radam": ("paddle.radam", {}),
    "paddle.adamw+groups": ("paddle.adamw", dict(parameters=[{"params": ["*/w"]},
                                                             {"params": ["*/b"], "learning_rate": 2.0,
                                                              "weight_decay": 0.0}])),
    "mindspore.adam+groups": ("mindspore.adam", dict(weight_decay=1e-3, groups=[
        {"params": ["*/w"]}, {"params": ["*/b"], "lr": 2e-3, "weight_decay": 0.0}])),
}


def _compile_s(update, *args, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        jax.clear_caches()
        t = time.perf_counter()
        jax.jit(update).lower(*args).compile()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--leaves", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--opts", default=",".join(ROWS), help=f"rows, comma-separated, of {list(ROWS)}")
    args = ap.parse_args()
    half = args.leaves // 2
    params = {f"layer{i:04d}": {"w": jnp.ones((16, 1 + i % 7)), "b": jnp.ones((1 + i % 7,))} for i in range(half)}
    grads = jax.tree.map(lambda x: x * 0.1, params)
    ref_tx = optax.adamw(1e-3, weight_decay=1e-2)
    ref = _compile_s(ref_tx.update, grads, ref_tx.init(params), params, repeat=args.repeat)
    print(f"{2 * half} leaves, median of {args.repeat} compiles, jax {jax.__version__}, "
          f"{jax.devices()[0].platform}; optax.adamw {ref:.2f} s")
    print(f"  {'row':22s} {'per group':>10s} {'per leaf':>10s} {'leaf/group':>11s} {'group/optax':>12s}")
    for row in args.opts.split(","):
        name, kwargs = ROWS[row]
        tx = gradxform.create(name, **kwargs)
        state = tx.init(params)
        grouped = _compile_s(tx.update, grads, state, params, repeat=args.repeat)
        per_leaf = _compile_s(tx.update, grads, expand_groups(state), params, repeat=args.repeat)
        print(f"  {row:22s} {grouped:9.2f}s {per_leaf:9.2f}s {per_leaf / grouped:10.2f}x {grouped / ref:11.2f}x")


if __name__ == "__main__":
    main()
