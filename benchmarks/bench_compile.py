"""XLA compile time of one jitted update: per-parameter multipliers held per
group (`GroupValues`, what ``init`` makes) against the same numbers as a
per-leaf vector (``expand_groups``, the layout before), beside optax.adamw.

    python benchmarks/bench_compile.py --leaves 300 --repeat 3

Leaves cycle through 7 shapes (as a real model repeats its layers' shapes),
so kernels of one shape can be shared. Each row: the median over
``--repeat`` of lowering + compiling the same update (``jax.jit(...).lower(...).compile()``,
a fresh compile each time). Not a test: nothing here asserts.
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
    args = ap.parse_args()
    half = args.leaves // 2
    params = {f"layer{i:04d}": {"w": jnp.ones((16, 1 + i % 7)), "b": jnp.ones((1 + i % 7,))} for i in range(half)}
    grads = jax.tree.map(lambda x: x * 0.1, params)
    tx = gradxform.create("mxnet.adam", learning_rate=1e-3, wd=1e-2, lr_mult={"*/b": 2.0}, wd_mult={"*/b": 0.0})
    grouped = tx.init(params)
    rows = {
        "optax.adamw (reference)": _compile_s(optax.adamw(1e-3, weight_decay=1e-2).update, grads,
                                              optax.adamw(1e-3).init(params), params, repeat=args.repeat),
        "mxnet.adam, multipliers per group": _compile_s(tx.update, grads, grouped, params, repeat=args.repeat),
        "mxnet.adam, multipliers per leaf": _compile_s(tx.update, grads, expand_groups(grouped), params,
                                                       repeat=args.repeat),
        "mxnet.adam, no multipliers": _compile_s(*(lambda t: (t.update, grads, t.init(params), params))(
            gradxform.create("mxnet.adam", learning_rate=1e-3, wd=1e-2)), repeat=args.repeat),
    }
    ref = rows["optax.adamw (reference)"]
    print(f"{2 * half} leaves, median of {args.repeat} compiles, jax {jax.__version__}, {jax.devices()[0].platform}")
    for name, s in rows.items():
        print(f"  {name:40s} {s:7.2f} s   {s / ref:5.2f}x optax")


if __name__ == "__main__":
    main()
