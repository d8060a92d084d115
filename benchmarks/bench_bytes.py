"""Bytes accessed per parameter by one compiled, donated step (update +
apply_updates) of every registered optimizer, beside optax's for the same rule
(issue 25 item 7). The figure is XLA's own cost analysis of the compiled
program, so it needs no timing and does not move with the machine's load; it
does depend on the backend's fusion decisions (XLA:CPU emits one loop per
output buffer, XLA:GPU fuses siblings), so CPU and GPU figures differ.

    python benchmarks/bench_bytes.py [--layers 4] [--width 512] [--names mxnet.adam,paddle.adamw]
    python benchmarks/bench_bytes.py --shapes resnet50,gpt2   # fused fed trees on real models' shapes

Each optimizer is built as ``tests/cases.py`` builds it (its sensible options:
momentum on, weight decay 1e-3) on a tree of ``--layers`` dense layers
(``kernel`` width x width, ``bias`` width) of float32; the step
``params, state <- apply_updates(params, update(grads, state, params))`` is
jitted with params and state donated (not for a row whose state lives in host
memory), lowered and compiled, never run. Columns:

``floor``: what one pass of the rule must read and write: read p, g and the
state, write p and the state, i.e. (2 P + G + 2 S) / n with S the state's bytes
(Adam: 4 + 4 + 4 + 2 x 8 = 28 B); a rule's extra inputs (THOR's factors) are read too.
``gradxform``, ``optax``: bytes accessed per parameter; ``optax`` is optax's
counterpart with the same options (weight decay added to the gradient with
``optax.add_decayed_weights`` where the framework couples it), ``-`` where
optax has no such rule. ``loops``: fusions and copies of the entry computation
whose output is as large as a kernel, per kernel (how many passes over the
parameters XLA:CPU makes). ``temp``: XLA temporaries (MiB).
Extra rows: a plain ``create('adam')`` (wd 0, a runtime hyperparameter) beside
optax.adam, and ``gradxform.fused`` fed ordinary trees (``max_leaf_size`` None
and 2**16) and ``fused.packed``. ``--shapes`` measures only Adam per leaf, ``fused`` fed trees
(``max_leaf_size`` None, 1024, 2**16) and optax.adam on the shapes of `bench_step.py`'s sets
(ResNet-50: 161 leaves, 25.6 M parameters; GPT-2 small). Not a test: nothing here asserts.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import cases  # noqa: E402  (tests/cases.py: how each optimizer is built)
import gradxform  # noqa: E402

WD = 1e-3


def _l2(tx):
    """Coupled decay in optax: ``g + wd * w`` before the rule (MXNet, MindSpore and Paddle's ``weight_decay``)."""
    return optax.chain(optax.add_decayed_weights(WD), tx)


# optax's counterpart of each row of tests/cases.py, with that row's options
OPTAX = {
    "mxnet.sgd": lambda: _l2(optax.sgd(0.1, momentum=0.9)),
    "mxnet.ccsgd": lambda: _l2(optax.sgd(0.1, momentum=0.9)),
    "mxnet.nag": lambda: _l2(optax.sgd(0.1, momentum=0.9, nesterov=True)),
    "mxnet.adam": lambda: _l2(optax.adam(0.05)),
    "mxnet.adamax": lambda: _l2(optax.adamax(0.05)),
    "mxnet.nadam": lambda: _l2(optax.nadam(0.05)),
    "mxnet.adagrad": lambda: _l2(optax.adagrad(0.1)),
    "mxnet.rmsprop": lambda: _l2(optax.rmsprop(0.01, decay=0.5, centered=True)),
    "mxnet.adadelta": lambda: _l2(optax.adadelta(1.0, rho=0.9)),
    "mxnet.lamb": lambda: optax.lamb(0.05, weight_decay=WD),
    "mxnet.lars": lambda: optax.lars(0.1, weight_decay=WD, momentum=0.9),
    "mindspore.adafactor": lambda: optax.adafactor(0.05, momentum=0.9, weight_decay_rate=WD,
                                                     multiply_by_parameter_scale=False),
    "mindspore.adagrad": lambda: _l2(optax.adagrad(0.1)),
    "mindspore.adam": lambda: _l2(optax.adam(0.05)),
    "mindspore.adam_offload": lambda: _l2(optax.adam(0.05)),
    "mindspore.adam_weight_decay": lambda: optax.adamw(0.05, weight_decay=WD),
    "mindspore.adamax": lambda: _l2(optax.adamax(0.05)),
    "mindspore.adadelta": lambda: _l2(optax.adadelta(1.0)),
    "mindspore.lamb": lambda: optax.lamb(0.05, weight_decay=WD),
    "mindspore.lars": lambda: optax.lars(0.1, weight_decay=WD, momentum=0.9),
    "mindspore.lazy_adam": lambda: _l2(optax.adam(0.05)),
    "mindspore.momentum": lambda: _l2(optax.sgd(0.1, momentum=0.9)),
    "mindspore.rmsprop": lambda: _l2(optax.rmsprop(0.01, momentum=0.5, centered=True)),
    "mindspore.rprop": lambda: optax.rprop(0.01),
    "mindspore.sgd": lambda: _l2(optax.sgd(0.1, momentum=0.9, nesterov=True)),
    "paddle.sgd": lambda: _l2(optax.sgd(0.1)),
    "paddle.momentum": lambda: _l2(optax.sgd(0.1, momentum=0.9, nesterov=True)),
    "paddle.adam": lambda: _l2(optax.amsgrad(0.05)),
    "paddle.adamw": lambda: optax.adamw(0.05, weight_decay=WD),
    "paddle.adamax": lambda: _l2(optax.adamax(0.05)),
    "paddle.adagrad": lambda: _l2(optax.adagrad(0.1)),
    "paddle.adadelta": lambda: _l2(optax.adadelta(1.0)),
    "paddle.rmsprop": lambda: _l2(optax.rmsprop(0.01, momentum=0.5, centered=True)),
    "paddle.lamb": lambda: optax.lamb(0.05, weight_decay=WD),
    "paddle.nadam": lambda: _l2(optax.nadam(0.05)),
    "paddle.radam": lambda: _l2(optax.radam(0.05)),
    "paddle.rprop": lambda: optax.rprop(0.01),
}


def nbytes(tree) -> int:
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree) if hasattr(x, "dtype"))


def compiled_costs(tx, params, grads, *, donate=True, extra=None, apply=optax.apply_updates):
    """(jitted step, state, compiled) of ``params, state <- apply(params,
    tx.update(grads, state, params, **extra(params)))``, params and state
    donated; the state is copied leaf by leaf (optax shares its zero counts)."""
    def step(p, s, g):
        u, s = tx.update(g, s, p, **(extra(p) if extra else {}))
        return apply(p, u), s

    state = jax.tree.map(jnp.copy, tx.init(params))
    fn = jax.jit(step, donate_argnums=(0, 1) if donate else ())
    return fn, state, fn.lower(params, state, grads).compile()


def figures(compiled, kernel_shape) -> dict:
    """XLA's bytes accessed, temporaries and the number of passes over a kernel-sized buffer."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    entry = compiled.as_text().split("\nENTRY ", 1)[-1]
    shape = f"f32[{','.join(map(str, kernel_shape))}]"
    loops = sum(1 for ln in entry.splitlines()
                if re.search(rf"= {re.escape(shape)}\S* (fusion|copy)\(", ln))
    return {"bytes": float(cost.get("bytes accessed", 0.0)), "temp": compiled.memory_analysis().temp_size_in_bytes,
            "loops": loops}


def make_tree(layers, width, seed, scale):
    key = jax.random.key(seed)
    return {f"l{i}": {"kernel": scale * jax.random.normal(jax.random.fold_in(key, 2 * i), (width, width)),
                      "bias": scale * jax.random.normal(jax.random.fold_in(key, 2 * i + 1), (width,))}
            for i in range(layers)}


def measure(tx, args, *, donate=True, extra=None, apply=optax.apply_updates):
    params, grads = make_tree(args.layers, args.width, 0, 0.05), make_tree(args.layers, args.width, 1, 1e-3)
    n = sum(x.size for x in jax.tree.leaves(params))
    _, state, compiled = compiled_costs(tx, params, grads, donate=donate, extra=extra, apply=apply)
    f = figures(compiled, (args.width, args.width))
    read_extra = nbytes(extra(params)) if extra else 0
    f["floor"] = (2 * nbytes(params) + nbytes(grads) + 2 * nbytes(state) + read_extra) / n
    f["per_param"] = f["bytes"] / n
    f["loops"] = f["loops"] / args.layers
    return f


def row(label, gx, ox=None):
    o = f"{ox['per_param']:7.1f} {gx['per_param'] / ox['per_param']:6.2f}x" if ox else f"{'-':>7s} {'':>7s}"
    print(f"| {label:34s} | {gx['floor']:6.1f} | {gx['per_param']:7.1f} | {gx['per_param'] / gx['floor']:5.2f}x "
          f"| {gx['loops']:4.1f} | {gx['temp'] / 2**20:5.1f} | {o} |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--names", default=None, help="comma list of registered names (default: all)")
    ap.add_argument("--no-extra", action="store_true", help="skip the plain adam and fused rows")
    ap.add_argument("--shapes", default=None, help="comma list of bench_step.py sets (resnet50, gpt2): "
                    "fused fed trees on those shapes instead of the table")
    args = ap.parse_args(argv)
    if args.shapes:
        return shapes_rows(args.shapes.split(","))
    names = args.names.split(",") if args.names else gradxform.registered_names()
    n = args.layers * (args.width + 1) * args.width
    print(f"jax {jax.__version__}, optax {optax.__version__}, {jax.default_backend()}; {args.layers} dense layers "
          f"of {args.width} ({n / 1e6:.2f} M float32 parameters, {2 * args.layers} leaves); bytes per parameter")
    print(f"| {'optimizer (tests/cases.py options)':34s} | floor  | gradxform | /floor | loops | temp MiB "
          f"| optax | gx/optax |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        c = cases.case(name)
        gx = measure(cases.create(name), args, donate=c.donatable, extra=c.update_args)
        ox = measure(OPTAX[name](), args, donate=c.donatable) if name in OPTAX else None
        row(name, gx, ox)
    if args.no_extra:
        return
    adam = gradxform.create("adam", learning_rate=1e-3)
    row("create('adam') (wd=0 default)", measure(adam, args), measure(optax.adam(1e-3), args))
    row("  optax: add_decayed_weights + adam", measure(_l2(optax.adam(1e-3)), args), measure(optax.adam(1e-3), args))
    print("rows below: the 'optax' columns hold create('adam') per leaf")
    for label, tx in [("fused(create('adam')) tree in/out", gradxform.fused(adam)),
                      ("  the same, max_leaf_size=2**16", gradxform.fused(adam, max_leaf_size=2**16)),
                      ("  the same, max_leaf_size=1024", gradxform.fused(adam, max_leaf_size=1024)),
                      ("fused.packed(create('adam'))", gradxform.fused.packed(adam))]:
        try:
            row(label, measure(tx, args, apply=gradxform.apply_updates), measure(adam, args))
        except ValueError:  # fed trees, a layout packing large leaves refuses (_fused.TREE_PACK_LIMIT)
            print(f"| {label:34s} | refused: fed trees, its layout packs leaves above TREE_PACK_LIMIT |")


def shapes_rows(sets) -> None:
    """Bytes per parameter of Adam fed ordinary trees of a real model's shapes."""
    from bench_step import SETS  # noqa: PLC0415

    adam = gradxform.create("adam", learning_rate=1e-3)
    for name in sets:
        shapes = SETS[name]()
        params = {k: jnp.zeros(s, jnp.float32) for k, s in shapes.items()}
        grads = {k: jnp.full(s, 1e-3, jnp.float32) for k, s in shapes.items()}
        n = sum(x.size for x in jax.tree.leaves(params))
        print(f"{name}: {len(shapes)} leaves, {n / 1e6:.1f} M float32 parameters; bytes per parameter")
        for label, tx, apply in [("create('adam') per leaf", adam, optax.apply_updates),
                                 ("fused(tx) fed trees", gradxform.fused(adam), gradxform.apply_updates),
                                 ("  max_leaf_size=1024", gradxform.fused(adam, max_leaf_size=1024),
                                  gradxform.apply_updates),
                                 ("  max_leaf_size=2**16", gradxform.fused(adam, max_leaf_size=2**16),
                                  gradxform.apply_updates),
                                 ("optax.adam", optax.adam(1e-3), optax.apply_updates)]:
            try:
                _, _, compiled = compiled_costs(tx, params, grads, apply=apply)
            except ValueError:  # fed trees, a layout packing large leaves refuses (_fused.TREE_PACK_LIMIT)
                print(f"  {label:26s} refused (its layout packs leaves above TREE_PACK_LIMIT)", flush=True)
                continue
            print(f"  {label:26s} {figures(compiled, (1,))['bytes'] / n:7.1f}", flush=True)


if __name__ == "__main__":
    main()
