"""MindSpore / TinyMS THOR, the second-order optimizer (``mindspore.nn.thor``).

THOR preconditions the gradient of each named layer (dense, convolution,
embedding) with the inverses of two Kronecker factors, ``A`` (covariance of
the layer's inputs ``a``) and ``G`` (covariance of the loss's gradient
``D`` with respect to the layer's outputs), refreshed every ``frequency``
steps, then takes a momentum step. The factors' inputs come from the user's
forward and backward pass as the extra argument ``layer_stats`` of
``update``; `gradxform.mindspore.thor_capture` collects them from a Flax
or Equinox model in one forward and backward pass.
"""
from __future__ import annotations

import fnmatch
import math
from typing import Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, identity, transformation
from .._spec import Fusion, declare
from .._elementwise import not_fusable
from .._hyper import hyper_scalar
from .._ranges import NON_NEGATIVE
from .._tree import param_names
from ..pieces import scale_by_lr, trace
from ..schedules.internal import COMPLETED, MindSporeListLR, as_update_schedule, check_number
from ._common import check_bool, check_float, parse
from .._types import Hyper, ParamTree
from .._domains import FINITE

__all__ = ["thor", "ThorState", "KINDS"]
DECLARED = (  # registered as 'mindspore.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('thor', ranges={"damping": NON_NEGATIVE},
                no_goldens="THOR has no CPU kernel and needs a network of DenseThor / Conv2dThor layers: "
                       "tests/test_thor.py checks a float64 transcription of its rule"),
)


KINDS = ("dense", "conv", "embedding", "layernorm")
_MATRIX_KINDS = ("dense", "conv", "embedding")
_NDIM = {"dense": 2, "conv": 4, "embedding": 2}

def _owner() -> str:
    return registered_name(thor)  # the name in messages (registered by the family's __init__)


_HI = jax.lax.Precision.HIGHEST


class ThorState(NamedTuple):
    """``hyper``: ``damping`` (the base value) and ``loss_scale``; ``a_inv``,
    ``g_inv``: per THOR layer (by parameter name) the damped inverse of its
    factors from the last cycle start (an embedding's ``a_inv`` is the
    diagonal, a vector)."""
    hyper: Hyper
    a_inv: dict[str, ParamTree]
    g_inv: dict[str, ParamTree]
    domains = {"a_inv": FINITE, "g_inv": FINITE}


def _every_parameter(name: str) -> bool:
    """MindSpore's default ``decay_filter``, ``lambda x: x.name not in []``."""
    del name
    return True


def _damping_schedule(damping):
    """(base value, schedule or None) of the ``damping`` argument: a number,
    a list / 1-D array (update i reads entry i, the last one after the end),
    or a schedule of the completed step."""
    if isinstance(damping, bool):
        raise TypeError(f"{_owner()}(damping=...): must be a number, a list / 1-D array or a schedule; got {damping!r}.")
    if isinstance(damping, (int, float)):
        check_number(_owner(), "damping", damping, low=0.0)
        return float(damping), None
    if isinstance(damping, (list, tuple)) or hasattr(damping, "shape"):
        arr = np.asarray(damping, np.float64)
        if arr.ndim > 1 or arr.size == 0:
            raise ValueError(f"{_owner()}(damping=...): a damping array must be a non-empty 0-D or 1-D; "
                             f"got shape {arr.shape}.")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ValueError(f"{_owner()}(damping=...): every value must be a finite number >= 0.")
        if arr.ndim == 0:
            return float(arr), None
        s = MindSporeListLR(arr, what=f"{_owner()}(damping=[...])")
        return s.base_lr, s
    if callable(damping):
        sched = as_update_schedule(damping, COMPLETED)
        base = getattr(sched, "base_lr", None)
        return (1.0 if base is None else float(base)), sched
    raise TypeError(f"{_owner()}(damping=...): must be a number, a list / 1-D array or a schedule; "
                    f"got {type(damping).__name__}.")


def _resolve_layers(layers: Mapping[str, str], names: list[str], shapes: list[tuple]) -> dict[str, str]:
    """parameter name -> kind. A key is an exact name or a glob pattern; an
    exact name wins over patterns, and among patterns the first match in
    ``layers`` wins (as `gradxform._tree.multipliers`). An exact name must
    exist; a pattern may match nothing (another model)."""
    by_name = dict(zip(names, shapes))
    exact = {k: v for k, v in layers.items() if not any(ch in k for ch in "*?[")}
    missing = [k for k in exact if k not in by_name]
    if missing:
        raise ValueError(f"{_owner()}: layers[{missing[0]!r}] names no parameter; the parameters are {names}.")
    out: dict[str, str] = {}
    for n in names:
        kind = exact.get(n)
        if kind is None:
            kind = next((v for k, v in layers.items() if k not in exact and fnmatch.fnmatchcase(n, k)), None)
        if kind is None:
            continue
        want = _NDIM.get(kind)
        if want is not None and len(by_name[n]) != want:
            raise ValueError(f"{_owner()}: layers names {n!r} as {kind!r}, which needs a {want}-D parameter; "
                             f"{n!r} has shape {by_name[n]}.")
        out[n] = kind
    return out


def _dims(kind: str, shape: tuple, layout: str) -> tuple[int, int]:
    """(size of A, size of G) of a THOR layer's parameter."""
    if kind == "embedding":
        return shape[0], shape[1]
    if layout == "in_out":  # Flax: (in, out), (kh, kw, in, out)
        return math.prod(shape[:-1]), shape[-1]
    return math.prod(shape[1:]), shape[0]  # MindSpore / PyTorch / Equinox: (out, in), (out, in, kh, kw)


def _block_inverse(m, block_size):
    """Inverse of a symmetric positive definite ``m`` by Cholesky; with a
    ``block_size``, the inverse of its block-diagonal part (blocks of that
    width, the last one narrower), as MindSpore's ``CholeskyTrsm(split_dim=128)``."""
    n = m.shape[-1]
    if block_size is None or n <= block_size:
        chol = jnp.linalg.cholesky(m)
        return cho_solve((chol, True), jnp.eye(n, dtype=m.dtype))
    nb = -(-n // block_size)
    pad = nb * block_size - n
    padded = jnp.pad(m, ((0, pad), (0, pad))) + jnp.diag(jnp.concatenate(
        [jnp.zeros(n, m.dtype), jnp.ones(pad, m.dtype)]))
    blocks = jnp.stack([padded[i * block_size:(i + 1) * block_size, i * block_size:(i + 1) * block_size]
                        for i in range(nb)])
    chol = jnp.linalg.cholesky(blocks)
    eye = jnp.broadcast_to(jnp.eye(block_size, dtype=m.dtype), blocks.shape)
    inv = jax.vmap(lambda c, e: cho_solve((c, True), e))(chol, eye)
    return jax.scipy.linalg.block_diag(*inv)[:n, :n]


def _factors(name: str, kind: str, st, dims, batch_size: int, loss_scale, dtype):
    """(A, G) of one layer from its ``layer_stats`` entry (checked at trace time)."""
    p, q = dims
    where = f"{_owner()}.update: layer_stats[{name!r}]"
    if not isinstance(st, Mapping):
        raise TypeError(f"{where} must be a dict with 'a' and 'D' (or 'A' and 'G'); got {type(st).__name__}.")
    if set(st) == {"A", "G"}:
        a_mat, g_mat = jnp.asarray(st["A"], dtype), jnp.asarray(st["G"], dtype)
        want_a = (p,) if kind == "embedding" else (p, p)
        if a_mat.shape != want_a or g_mat.shape != (q, q):
            raise ValueError(f"{where}: A must have shape {want_a} and G {(q, q)}; got {a_mat.shape} and "
                             f"{g_mat.shape}.")
        return a_mat, g_mat
    if set(st) != {"a", "D"}:
        raise ValueError(f"{where} must have the keys 'a' and 'D' (or 'A' and 'G'); got {sorted(st)}.")
    a, d = jnp.asarray(st["a"]), jnp.asarray(st["D"], dtype)
    if d.ndim < 1 or d.shape[-1] != q:
        raise ValueError(f"{where}['D']: the last axis must be the layer's {q} outputs; got shape {d.shape}.")
    d2 = d.reshape(-1, q)
    rows = d2.shape[0]
    if rows == 0:  # E[D D^T] over no samples is 0/0: NaN inverses, then NaN momentum
        raise ValueError(f"{where}['D']: has no rows (shape {d.shape}); THOR's factors are averages over the "
                         "batch's samples, so capture them from a non-empty batch.")
    # G = E[D D^T] over the rows, with MindSpore's batch_size^2 / loss_scale^2: D is the
    # gradient of the (mean, loss-scaled) loss, so this is the per-sample covariance
    g_mat = jnp.matmul(d2.T, d2, precision=_HI) * ((batch_size / loss_scale.astype(dtype)) ** 2 / rows)
    if kind == "embedding":
        if not jnp.issubdtype(a.dtype, jnp.integer) or a.size != rows:
            raise ValueError(f"{where}['a']: an embedding's 'a' are its integer ids, one per row of D "
                             f"({rows}); got {a.dtype}{list(a.shape)}.")
        counts = jnp.zeros((p,), dtype).at[a.reshape(-1)].add(1.0)
        return counts / batch_size, g_mat
    if a.ndim < 1 or a.shape[-1] != p or a.size // p != rows:
        raise ValueError(f"{where}['a']: must be {rows} rows of the layer's {p} inputs (conv: patches in "
                         f"the kernel's flatten order); got shape {a.shape}.")
    a2 = a.reshape(-1, p).astype(dtype)
    return jnp.matmul(a2.T, a2, precision=_HI) / rows, g_mat


def _precondition(kind: str, g, a_inv, g_inv, layout: str):
    """G^-1 g A^-1 in the parameter's layout."""
    if kind == "embedding":
        return jnp.matmul(a_inv[:, None] * g, g_inv, precision=_HI)
    if layout == "in_out":
        gm = g.reshape(-1, g.shape[-1])
        return jnp.matmul(jnp.matmul(a_inv, gm, precision=_HI), g_inv, precision=_HI).reshape(g.shape)
    gm = g.reshape(g.shape[0], -1)
    return jnp.matmul(jnp.matmul(g_inv, gm, precision=_HI), a_inv, precision=_HI).reshape(g.shape)


def _thor_precondition(layers, layout, frequency, batch_size, loss_scale, damping, factor_damping, block_size):
    """``g / loss_scale``, then each THOR layer's G^-1 g A^-1 (inverses refreshed at cycle starts)."""
    base, sched = _damping_schedule(damping)

    def resolve(params):
        leaves = jax.tree.leaves(params)
        names = param_names(params)
        return names, _resolve_layers(layers, names, [tuple(x.shape) for x in leaves])

    def init(params):
        names, kinds = resolve(params)
        leaves = jax.tree.leaves(params)
        a_inv, g_inv = {}, {}
        for n, x in zip(names, leaves):
            if kinds.get(n) in _MATRIX_KINDS:
                p, q = _dims(kinds[n], x.shape, layout)
                dt = jnp.promote_types(x.dtype, jnp.float32)
                a_inv[n] = jnp.ones((p,), dt) if kinds[n] == "embedding" else jnp.eye(p, dtype=dt)
                g_inv[n] = jnp.eye(q, dtype=dt)
        return ThorState({"damping": hyper_scalar(base), "loss_scale": hyper_scalar(loss_scale)}, a_inv, g_inv)

    @declare(needs=("count",), fusion=Fusion(refuse="THOR multiplies whole matrices by per-layer inverses"))
    def update(updates, state, params=None, **extra_args):
        leaves, treedef = jax.tree.flatten(updates)
        names, kinds = resolve(updates)
        counts = treedef.flatten_up_to(context_value(extra_args, "count", update))
        ls = state.hyper["loss_scale"]
        thor_names = [n for n in names if kinds.get(n) in _MATRIX_KINDS]
        stats = extra_args.get("layer_stats")
        if thor_names:
            if stats is None:
                raise ValueError(
                    f"{_owner()}.update needs layer_stats=: for each THOR layer {thor_names} a dict "
                    "{'a': layer inputs, 'D': gradient of the loss at the layer's outputs} (or precomputed "
                    "{'A': ..., 'G': ...}); gradxform.mindspore.thor_capture collects them. Pass them on "
                    "every step (they are read at cycle starts only).")
            if not isinstance(stats, Mapping) or set(stats) != set(thor_names):
                got = sorted(stats) if isinstance(stats, Mapping) else type(stats).__name__
                raise ValueError(f"{_owner()}.update: layer_stats must have exactly the THOR layers "
                                 f"{sorted(thor_names)} as keys; got {got}.")
        layer_stats: Mapping = stats if isinstance(stats, Mapping) else {}  # a Mapping wherever a THOR layer reads it
        a_new, g_new, out = dict(state.a_inv), dict(state.g_inv), []
        for n, g, c in zip(names, leaves, counts):
            kind = kinds.get(n)
            dt = jnp.promote_types(g.dtype, jnp.float32)
            u = g.astype(dt) / ls.astype(dt)
            if kind is not None:
                step = jnp.asarray(c, jnp.int32) - 1  # MindSpore's global_step, before its increment
                lam = (sched.lr_for_update(c, state.hyper["damping"]) if sched is not None
                       else state.hyper["damping"])
                lam = jnp.asarray(lam).astype(dt)
                shift = lam if factor_damping == "seed" else jnp.sqrt(lam)
            if kind in _MATRIX_KINDS:
                dims = _dims(kind, g.shape, layout)
                a_mat, g_mat = _factors(n, kind, layer_stats[n], dims, batch_size, ls, dt)

                def fresh(ops, kind=kind):
                    a_m, g_m, sh, _, _ = ops
                    a_i = (1.0 / (a_m + sh) if kind == "embedding" else
                           _block_inverse(a_m + sh * jnp.eye(a_m.shape[0], dtype=a_m.dtype), block_size))
                    return a_i, _block_inverse(g_m + sh * jnp.eye(g_m.shape[0], dtype=g_m.dtype), block_size)

                # operands, not closures: the same jaxpr on every call (op-by-op runs hit the cache)
                ops = (a_mat, g_mat, shift, state.a_inv[n].astype(dt), state.g_inv[n].astype(dt))
                a_i, g_i = jax.lax.cond(step % frequency == 0, fresh, lambda o: (o[3], o[4]), ops)
                a_new[n], g_new[n] = a_i.astype(state.a_inv[n].dtype), g_i.astype(state.g_inv[n].dtype)
                u = _precondition(kind, u, a_i, g_i, layout)
            elif kind == "layernorm":
                # MindSpore's _process_layernorm: every step, sqrt(damping) in both modes
                u = u / (jnp.square(u) / batch_size + jnp.sqrt(lam))
            out.append(u.astype(g.dtype))
        return treedef.unflatten(out), ThorState(state.hyper, a_new, g_new)

    return transformation(init, update)


def _clip_each_by_norm(enabled: bool) -> GradientTransformation:
    """MindSpore THOR's ``clip_gradient``: each leaf through ``nn.ClipByNorm``
    with clip_norm 1.0, ``g * 1 / max(||g||, 1)``."""
    if not enabled:
        return identity()

    def init(params):
        del params
        return ()

    @not_fusable("a norm per parameter")
    def update(updates, state, params=None, **extra_args):
        del params, extra_args

        def one(g):
            norm = jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.promote_types(g.dtype, jnp.float32)))))
            return (g / jnp.maximum(norm, 1.0).astype(g.dtype)).astype(g.dtype)
        return jax.tree.map(one, updates), state

    return transformation(init, update)


def thor(net=None, learning_rate=None, damping=None, momentum=None, weight_decay=0.0, loss_scale=1.0,
         batch_size=32, use_nesterov=False, decay_filter: Callable[[str], bool] = _every_parameter,
         split_indices=None, enable_clip_grad=False, frequency=100, *, layers: Mapping[str, str],
         layout: str = "in_out", factor_damping: str = "seed", block_size: int | None = None,
         skip_nonfinite=False) -> GradientTransformation:
    r"""MindSpore THOR (``nn.thor`` -> ``ThorGpu``), second-order with Kronecker factors.

    Trace-based Hardware-driven layer-ORiented Natural Gradient Descent
    Computation (TinyMS ``optimizers.thor``; Chen et al., AAAI 2021). The rule
    of the TinyMS seed (``003_*.txt``)::

        A_i = E[a_{i-1} a_{i-1}^T]        (inputs of layer i)
        G_i = E[D_i D_i^T]                (gradient of the loss at layer i's outputs)
        m_i = momentum * m_i + (G_i + damping I)^-1  g_i  (A_i + damping I)^-1
        w_i = w_i - learning_rate * m_i

    with the order of MindSpore's ``ThorGpu.construct``::

        g = g / loss_scale
        g = G^-1 g A^-1                    for each THOR layer (inverses from the last cycle start)
        g = g + weight_decay * w           if decay_filter(name)
        g = clip_by_norm(g, 1.0)           per leaf, if enable_clip_grad
        v = momentum * v + g;  w -= lr * v   (use_nesterov: w -= lr * (g + momentum * v))

    Checked against a float64 NumPy transcription of the seed, not against
    MindSpore: THOR has GPU and Ascend kernels only, no CPU kernel to record
    goldens from. Parameters that are not THOR layers (biases, BatchNorm,
    unnamed layers) get the same momentum step without preconditioning, as
    in MindSpore.

    ``net``: MindSpore's first argument, accepted in its place so that
    ``thor(net, learning_rate, damping, momentum, ...)`` reads as MindSpore's;
    it may be the parameter pytree, a model object or None, and is not read
    (gradxform sees the parameters at ``init``). ``learning_rate``,
    ``damping`` and ``momentum`` are required, as in MindSpore (None is a
    TypeError naming the one missing); their None default only lets ``net``
    be left out (``gradxform.create('mindspore.thor', learning_rate=...)``).

    ``layers`` replaces what MindSpore reads off ``net`` (whose ``ConvertNetUtils`` swaps
    Dense/Conv2d/Embedding cells for their THOR versions that record ``a``
    and ``D``): a mapping from a parameter name (``"Dense_0/kernel"``) or a
    glob pattern (``"*/kernel"``) to ``"dense"``, ``"conv"``, ``"embedding"``
    or ``"layernorm"``. An exact name must exist; a pattern may match nothing.

    ``update(grads, state, params, layer_stats=...)``: ``layer_stats`` maps
    each dense / conv / embedding layer's parameter name to either
    ``{'a': ..., 'D': ...}``, its inputs ``a`` (``(..., n_in)``; conv: the
    patches ``(..., kh*kw*c_in)`` in the kernel's flatten order; embedding:
    the integer ids) and ``D``, the gradient of the loss (as differentiated:
    mean over the batch, times loss_scale) at its outputs ``(..., n_out)``,
    one row per row of ``a``; or precomputed factors ``{'A': ..., 'G': ...}``
    (an embedding's ``A`` a vector) used as given. From ``a`` and ``D``
    (MindSpore's ``DenseThor``/``Conv2dThor``/``EmbeddingThor`` statistics
    with the optimizer's normalisers), over the ``r`` rows::

        A = a^T a / r        (embedding: A = counts of each id / batch_size, a diagonal)
        G = D^T D / r * batch_size^2 / loss_scale^2

    (with a mean loss ``D = loss_scale * dl_n / batch_size``, so ``G`` is the
    mean of the per-sample ``dl_n dl_n^T``). They are needed on every step,
    since shapes must not change under ``jit``, and read only when
    ``(count - 1) % frequency == 0`` (MindSpore's ``ThorModel`` computes the
    inverses on the first step of each cycle of ``frequency`` steps and
    reuses them on the other ``frequency - 1``), under ``lax.cond``. Without
    them ``update`` raises, naming the layers.

    Args:
      learning_rate: >= 0, a list / 1-D array (update i reads entry i, as
        MindSpore's ``get_lr`` at ``global_step``; the last one after the
        end), or a `gradxform.schedules` schedule. (MindSpore requires a
        Tensor; a number is accepted here too.)
      damping: >= 0, a list / 1-D array read at the same step index (the seed's
        example passes one value per step), or a schedule of the completed
        step; only cycle-start values are used (and every step's for
        ``layernorm``). A hyperparameter (``set_hyper(damping=...)`` scales a
        list as it does a learning rate list).
      momentum: float >= 0.
      weight_decay: int or float >= 0 (after the preconditioning, not
        multiplied by loss_scale, as ``apply_decay`` in ``ThorGpu``).
      loss_scale: float > 0.
      batch_size: int > 0, the normaliser above (static).
      use_nesterov: bool (static; MindSpore's ``ThorAscend`` has no Nesterov).
      decay_filter: ``name -> bool``, which parameters decay (default: all,
        MindSpore's ``lambda x: x.name not in []``).
      split_indices: list of ints or None: MindSpore's all-reduce fusion
        groups of A/G, only meaningful in distributed training; checked and
        otherwise without effect here.
      enable_clip_grad: bool (static): clip each leaf to norm 1.0 (MindSpore's
        ``GRADIENT_CLIP_TYPE = 1``, ``GRADIENT_CLIP_VALUE = 1.0``).
      frequency: int >= 2 (static): steps per cycle of the inverses.
      layers: see above (static).
      layout: ``"in_out"`` (Flax: dense kernels
        ``(in, out)``, conv ``(kh, kw, in, out)``) or ``"out_in"`` (MindSpore,
        Equinox, PyTorch: ``(out, in)``, ``(out, in, kh, kw)``); embedding
        tables are ``(vocab, dim)`` in both.
      factor_damping: ``"seed"``: ``A + damping I`` and ``G + damping I``, the
        seed's formula. ``"sqrt"``: ``+ sqrt(damping) I`` on each factor, as
        both of MindSpore's kernels do for dense and embedding layers (so the
        product's damping is about ``damping``, as in K-FAC's factored
        Tikhonov damping). Layernorm uses ``sqrt(damping)`` in both modes,
        as MindSpore does.
      block_size: None (exact inverses, the seed) or an int: invert only the
        block-diagonal part of each damped factor, blocks of that width (the
        last narrower) — MindSpore's ``CholeskyTrsm(split_dim=128)`` on GPU,
        and its Ascend kernels with ``diag_block_dim = 128`` (identity padding
        to a multiple of 128; 64 kept whole): pass ``block_size=128`` for both.

    MindSpore details not reproduced (each differs between its backends, or
    is a numeric device trick):

    * Conv normalisers. GPU's ``Conv2dThor`` averages the im2col patches and
      ``D`` over the batch *before* the outer products, and the optimizer
      divides damping by the spatial normalisers and scales both inverses by
      ``sqrt(1 / a_normalizer)``; Ascend uses per-patch covariances (as here)
      with ``damping * batch_size / normalizer`` under the root and scales the
      product by ``batch_size / a_normalizer``. Here a conv is a dense layer
      over its patches (the seed's rule), with the damping of ``factor_damping``.
    * Ascend computes the products in float16 and rescales each inverse by
      its absolute maximum (``CusFusedAbsMax1``), a range trick that cancels
      in exact arithmetic; here everything is float32 (float64 under x64).
    * Ascend uses an identity ``G`` for a 2-output dense layer (BERT's NSP
      head) and fixed device layouts for some ResNet-50 shapes.
    * Distributed all-reduce of A and G (``split_indices``): not done here;
      pass already reduced statistics.
    """
    del net  # MindSpore's network: gradxform sees the parameters at init, the layers in ``layers``
    owner = registered_name(thor)
    missing = [k for k, v in (("learning_rate", learning_rate), ("damping", damping), ("momentum", momentum))
               if v is None]
    if missing:
        raise TypeError(f"{owner}: missing required argument {missing[0]!r} (MindSpore's "
                        f"thor(net, learning_rate, damping, momentum, ...) requires it).")
    o = parse(owner, learning_rate, weight_decay, loss_scale, None, skip_nonfinite=skip_nonfinite)
    momentum = check_float(owner, "momentum", momentum)  # a float (it accepts floats only): the same value
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, float):
        raise TypeError(f"{owner}(loss_scale=...): loss_scale must be a float; got {loss_scale!r}.")
    check_bool(owner, "use_nesterov", use_nesterov)
    check_bool(owner, "enable_clip_grad", enable_clip_grad)
    if isinstance(frequency, bool) or not isinstance(frequency, int):
        raise TypeError(f"{owner}(frequency=...): frequency must be an int; got {frequency!r}.")
    if frequency < 2:
        raise ValueError(f"{owner}(frequency=...): frequency must be at least 2; got {frequency}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"{owner}(batch_size=...): must be a positive int; got {batch_size!r}.")
    if not callable(decay_filter):
        raise TypeError(f"{owner}(decay_filter=...): must be a function of the parameter name.")
    if split_indices is not None and (not isinstance(split_indices, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in split_indices)):
        raise TypeError(f"{owner}(split_indices=...): must be None or a list of ints >= 0; got {split_indices!r}.")
    if not isinstance(layers, Mapping) or not all(isinstance(k, str) for k in layers):
        raise TypeError(f"{owner}(layers=...): must map parameter names or glob patterns to a kind; got {layers!r}.")
    bad = {k: v for k, v in layers.items() if v not in KINDS}
    if bad:
        raise ValueError(f"{owner}(layers=...): kinds must be one of {KINDS}; got {bad}.")
    if layout not in ("in_out", "out_in"):
        raise ValueError(f"{owner}(layout=...): must be 'in_out' or 'out_in'; got {layout!r}.")
    if factor_damping not in ("seed", "sqrt"):
        raise ValueError(f"{owner}(factor_damping=...): must be 'seed' or 'sqrt'; got {factor_damping!r}.")
    if block_size is not None and (isinstance(block_size, bool) or not isinstance(block_size, int)
                                   or block_size < 1):
        raise ValueError(f"{owner}(block_size=...): must be None or a positive int; got {block_size!r}.")
    return o.build(
        _thor_precondition(dict(layers), layout, frequency, batch_size, loss_scale, damping, factor_damping,
                           block_size),
        o.decay(loss_scaled=False, decay_filter=decay_filter),
        _clip_each_by_norm(enable_clip_grad),
        trace(momentum, nesterov=use_nesterov),
        scale_by_lr())
