"""THE optimizer table: one row per registered optimizer, kwargs and capability flags.

Adding an optimizer adds one row here. A registered name without a row is
still tested, with `DEFAULT` (its defaults, and only the properties every
optimizer must have), except that tests/test_fused.py asks its row to say
whether it fuses (``fuses``). Tests read flags; they never branch on a name.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import gradxform


@dataclasses.dataclass(frozen=True)
class Case:
    """How the shared harness drives one optimizer.

    kwargs: keywords for ``gradxform.create`` (small, valid, exercising the
      optional pieces: momentum on, some weight decay).
    zero_wd: the keyword overrides that switch every weight decay off.
    zero_grad_fixed: a zero gradient with zero weight decay leaves the
      parameters unchanged (False where noise, a closed form or a
      proximal step moves them anyway).
    zero_grad_atol: absolute tolerance for that check (0: bit-exact).
    converges: 200 steps on a small quadratic lower the loss.
    rtol, atol: tolerance for jit against op-by-op, vmap against a loop.
    donatable: a jitted step may donate params and state (False where the
      state lives in host memory: XLA CPU aborts the process on donating a
      pinned_host buffer, jax 0.10.2).
    fuses: ``gradxform.fused`` runs it on flat buffers with these kwargs
      (every piece of its chain is declared `fusable`); None: not stated,
      which tests/test_fused.py rejects, so every optimizer needs a row
      saying it. Renaming or moving a piece must not change this.
    bit_exact: ``gradxform.fused.bit_exact``: the fused run equals the
      per-leaf one bit for bit (False where it sums per-leaf norms over a
      buffer or applies per-leaf values per element: float32 rounding).
    """
    kwargs: dict = dataclasses.field(default_factory=dict)
    zero_wd: dict = dataclasses.field(default_factory=dict)
    zero_grad_fixed: bool = False
    zero_grad_atol: float = 0.0
    converges: bool = True
    rtol: float = 1e-5
    atol: float = 1e-6
    donatable: bool = True
    fuses: bool | None = None
    bit_exact: bool = True
    # optax.tree_map_params gives every state field a valid sharding (False where the state
    # holds trees shaped like the parameters' tree but not like each parameter: stacked or
    # factored statistics, per-layer factors; optax's own adafactor has the same limit)
    tree_map_params: bool = True
    # extra keyword arguments of ``update`` that the optimizer needs, from the
    # params (THOR's ``layer_stats``); `create` supplies them where a caller gives none
    update_args: Any = None
    # learning_rate may be a schedule object (False where the framework takes a number only: MindSpore
    # FTRL's float, Paddle Rprop, whose kernel reads its own per-element rates)
    takes_schedule: bool = True


DEFAULT = Case()

_WD = {"wd": 0.0}
TABLE: dict[str, Case] = {
    "mxnet.sgd": Case(dict(learning_rate=0.1, momentum=0.9, wd=1e-3), _WD, True, fuses=True),
    "mxnet.ccsgd": Case(dict(learning_rate=0.1, momentum=0.9, wd=1e-3), _WD, True, fuses=True),
    "mxnet.nag": Case(dict(learning_rate=0.1, momentum=0.9, wd=1e-3), _WD, True, fuses=True),
    "mxnet.signum": Case(dict(learning_rate=0.01, momentum=0.9, wd=1e-3, wd_lh=1e-3),
                         {"wd": 0.0, "wd_lh": 0.0}, True, fuses=True),
    "mxnet.lbsgd": Case(dict(learning_rate=0.1, momentum=0.9, wd=1e-3, batch_scale=2,
                             warmup_epochs=1, updates_per_epoch=4), _WD, True, fuses=True),
    "mxnet.dcasgd": Case(dict(learning_rate=0.1, momentum=0.9, wd=1e-3, lamda=0.04), _WD, True, fuses=True),
    "mxnet.sgld": Case(dict(learning_rate=1e-3, wd=1e-3, seed=3), _WD, False, converges=False, fuses=False),
    "mxnet.adam": Case(dict(learning_rate=0.05, wd=1e-3), _WD, True, fuses=True),
    # MXNet Adamax divides m by u = max(beta2 u, |g|) with no epsilon: a zero
    # first gradient gives 0/0 = NaN in MXNet too (parity, not a bug here).
    "mxnet.adamax": Case(dict(learning_rate=0.05, wd=1e-3), _WD, False, fuses=True),
    "mxnet.nadam": Case(dict(learning_rate=0.05, wd=1e-3), _WD, True, fuses=True, bit_exact=False),
    "mxnet.adagrad": Case(dict(learning_rate=0.1, wd=1e-3), _WD, True, fuses=True),
    "mxnet.rmsprop": Case(dict(learning_rate=0.01, wd=1e-3, centered=True, gamma2=0.5,
                               clip_weights=10.0), _WD, True, fuses=True),
    "mxnet.adadelta": Case(dict(rho=0.9, wd=1e-3), _WD, True, fuses=True),
    "mxnet.ftml": Case(dict(learning_rate=0.05, wd=1e-3), _WD, True, zero_grad_atol=1e-6, fuses=True),
    # FTRL's closed form sets w = 0 where |z| <= lamda1: a zero gradient moves w.
    "mxnet.ftrl": Case(dict(learning_rate=0.1, wd=1e-3), _WD, False, fuses=True),
}

_MS_WD = {"weight_decay": 0.0}
TABLE.update({
    "mindspore.adafactor": Case(dict(learning_rate=0.05, relative_step=False, scale_parameter=False,
                                     weight_decay=1e-3), _MS_WD, True, fuses=False, tree_map_params=False),
    "mindspore.adagrad": Case(dict(learning_rate=0.1, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "mindspore.adam": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "mindspore.adam_offload": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, donatable=False,
                                   fuses=False),
    "mindspore.adam_weight_decay": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    # FTRL's closed form sets w = 0 where |u| <= l1.
    "mindspore.ftrl": Case(dict(learning_rate=0.1, l1=1e-3, weight_decay=1e-3), _MS_WD, False, fuses=True,
                           takes_schedule=False),
    "mindspore.lamb": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True, bit_exact=False),
    "mindspore.lars": Case(dict(optimizer=gradxform.create("mindspore.momentum", learning_rate=0.1, momentum=0.9),
                                weight_decay=1e-3), _MS_WD, True, fuses=True, bit_exact=False),
    "mindspore.lazy_adam": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True, bit_exact=False),
    "mindspore.momentum": Case(dict(learning_rate=0.1, momentum=0.9, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "mindspore.proximal_adagrad": Case(dict(learning_rate=0.1, l1=1e-3, l2=1e-3, weight_decay=1e-3),
                                       {"weight_decay": 0.0, "l1": 0.0, "l2": 0.0}, True, fuses=True),
    "mindspore.rmsprop": Case(dict(learning_rate=0.01, momentum=0.5, centered=True, weight_decay=1e-3),
                              _MS_WD, True, fuses=True),
    "mindspore.sgd": Case(dict(learning_rate=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3), _MS_WD, True,
                          fuses=True),
    "paddle.asgd": Case(dict(learning_rate=0.05, batch_num=2, weight_decay=1e-3), _MS_WD, True, fuses=False,
                        tree_map_params=False),
    # -- thor (issue 15): precomputed factors of every 2-D 'kernel', derived from the params --
    "mindspore.thor": Case(dict(learning_rate=0.1, damping=[0.05, 0.04] + [0.03] * 30, momentum=0.9, weight_decay=1e-3,
                                frequency=2, layers={"*/kernel": "dense"}), _MS_WD, True, fuses=False,
                           tree_map_params=False, update_args=lambda params: {"layer_stats": _thor_factors(params)}),
})

# -- paddle family (issue 17) ------------------------------------------------------------
TABLE.update({
    "paddle.sgd": Case(dict(learning_rate=0.1, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "paddle.momentum": Case(dict(learning_rate=0.1, momentum=0.9, use_nesterov=True, weight_decay=1e-3), _MS_WD,
                            True, fuses=True),
    "paddle.adam": Case(dict(learning_rate=0.05, amsgrad=True, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "paddle.adamw": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    # Paddle's Adamax: u = max(|g|, beta2 u + eps) > 0, so a zero gradient is finite
    "paddle.adamax": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "paddle.adagrad": Case(dict(learning_rate=0.1, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "paddle.adadelta": Case(dict(learning_rate=1.0, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "paddle.rmsprop": Case(dict(learning_rate=0.01, momentum=0.5, centered=True, weight_decay=1e-3), _MS_WD, True,
                           fuses=True),
    "paddle.lamb": Case(dict(learning_rate=0.05, lamb_weight_decay=1e-3), {"lamb_weight_decay": 0.0}, True,
                        fuses=True, bit_exact=False),
    "paddle.nadam": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "paddle.radam": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    # Rprop steps by sign(g) * per-element rates: a zero gradient keeps w; no weight decay
    "paddle.rprop": Case(dict(learning_rate=0.01), {}, True, fuses=True, takes_schedule=False),
})

# -- issue 24: the optimizers the recorded versions have and gradxform lacked --------------
TABLE.update({
    "mxnet.lamb": Case(dict(learning_rate=0.05, wd=1e-3), _WD, True, fuses=True, bit_exact=False),
    "mxnet.lars": Case(dict(learning_rate=0.1, momentum=0.9, wd=1e-3, eta=0.01), _WD, True, fuses=True,
                       bit_exact=False),
    # GroupAdaGrad: no weight decay (MXNet asserts wd == 0); the row history is not shaped like w
    "mxnet.groupadagrad": Case(dict(learning_rate=0.1), {}, True, fuses=False),
    "mindspore.adamax": Case(dict(learning_rate=0.05, weight_decay=1e-3), _MS_WD, True, fuses=True),
    "mindspore.adadelta": Case(dict(learning_rate=1.0, weight_decay=1e-3), _MS_WD, True, fuses=True),
    # Rprop: a zero gradient has sign 0, so the weight stays
    "mindspore.rprop": Case(dict(learning_rate=0.01, weight_decay=1e-3), _MS_WD, True, fuses=True),
    # ASGD shrinks w by (1 - lambd * eta) whatever the gradient
    "mindspore.asgd": Case(dict(learning_rate=0.05, lambd=1e-3, t0=5.0, weight_decay=1e-3), _MS_WD, False,
                           fuses=True),
})


# -- neutral family: optimizers no framework has, under optax's names ------------------------
TABLE.update({
    # Lion (its mask, per-leaf decay multipliers of 1 or 0, is tests/test_neutral.py's: against optax,
    # fused, and through a checkpoint and optax.tree_map_params)
    "neutral.lion": Case(dict(learning_rate=0.01, weight_decay=1e-3), {"weight_decay": 0.0}, True, fuses=True),
})


def case(name: str) -> Case:
    """The row for ``name``, or `DEFAULT` for a registered optimizer without one."""
    return TABLE.get(name, DEFAULT)


def names() -> list[str]:
    """Every registered optimizer (new families are covered automatically)."""
    return gradxform.registered_names()


def _thor_factors(params) -> dict:
    """THOR's factors for each 2-D ``.../kernel`` of ``params``: A = I + w w^T / 4,
    G = I + w^T w / 4 (symmetric positive definite, change with the params, vmap-safe)."""
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    out = {}
    for path, w in jax.tree_util.tree_flatten_with_path(params)[0]:
        name = "/".join(gradxform._tree.key_name(k) for k in path)
        if name.endswith("/kernel") and w.ndim == 2:
            w = w.astype(jnp.float32)
            if any(jax.typeof(w).sharding.spec):  # explicit mesh axes (tests/test_sharding.py): w w^T needs w whole
                w = jax.sharding.reshard(w, jax.sharding.PartitionSpec())
            out[name] = {"A": jnp.eye(w.shape[0]) + w @ w.T / 4, "G": jnp.eye(w.shape[1]) + w.T @ w / 4}
    return out


def create(name: str, **overrides: Any):
    """``gradxform.create(name, **row.kwargs, **overrides)``; a row with
    ``update_args`` gets them added to every ``update`` call that passes none."""
    tx = gradxform.create(name, **{**case(name).kwargs, **overrides})
    extra = case(name).update_args
    if extra is None:
        return tx

    def update(updates, state, params=None, **extra_args):
        return tx.update(updates, state, params, **{**extra(params), **extra_args})

    return tx._replace(update=update)
