"""The keywords every MXNet optimizer accepts, checked once, and the chain head they make.

MXNet's ``Optimizer.__init__`` takes ``learning_rate, wd, rescale_grad,
clip_gradient, lr_scheduler, multi_precision, begin_num_update,
param_idx2name``; Gluon adds per-parameter ``lr_mult``/``wd_mult``. Here each
becomes a piece (or an option of `track_step`), and every optimizer module
assembles its rule from them in the order MXNet applies them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from .._base import GradientTransformation, chain
from .._hyper import check_range
from .._ranges import check_hyper
from .._tree import check_mapping_keys, multipliers
from .._optimizer import finalize
from ..pieces.internal import FP16_WARNING
from ..pieces import add_decayed_weights, clip_by_value, provide_weight_decay, rescale, track_step

__all__ = ["MXNetOptions", "parse_options", "COMMON_DEFAULTS"]

COMMON_DEFAULTS: dict[str, Any] = dict(
    wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None, multi_precision=False,
    begin_num_update=0, lr_mult=None, wd_mult=None, param_idx2name=None, skip_nonfinite=False,
)


def _module_wd_default(name: str) -> float:
    # MXNet Optimizer.set_wd_mult: with param_idx2name, names not ending in
    # _weight or _gamma are not decayed (biases, BatchNorm beta, running stats).
    return 1.0 if name.endswith("_weight") or name.endswith("_gamma") else 0.0


@dataclasses.dataclass(frozen=True)
class MXNetOptions:
    owner: str
    learning_rate: float
    wd: float
    rescale_grad: float
    clip_gradient: float | None
    lr_scheduler: Callable | None
    multi_precision: bool
    begin_num_update: int
    lr_mult: Any
    wd_mult: Any
    param_idx2name: Any
    skip_nonfinite: bool

    # -- per-parameter multipliers --------------------------------------------
    def _resolver(self, mapping, module_rule: bool, what: str):
        idx2name = self.param_idx2name

        def resolve(names):
            if idx2name is True:
                mx_names = list(names)
            elif idx2name:
                mx_names = [idx2name.get(i, n) for i, n in enumerate(names)]
            else:
                mx_names = list(names)
            if mapping and not callable(mapping):
                known = list(dict.fromkeys(mx_names + list(names)))
                check_mapping_keys(known, {k: v for k, v in mapping.items() if not isinstance(k, int)}, what)
            default = _module_wd_default if (module_rule and idx2name) else 1.0
            by_name = {k: v for k, v in (mapping or {}).items() if not isinstance(k, int)} \
                if not callable(mapping) else mapping
            out = multipliers(mx_names, by_name, default, what)
            if mapping and not callable(mapping):
                # MXNet also accepts integer indices as keys (its legacy form).
                for k, v in mapping.items():
                    if isinstance(k, int):
                        if not 0 <= k < len(names):
                            raise ValueError(f"{what}: index {k} is out of range for {len(names)} parameters.")
                        out[k] = float(v)
            return out

        return resolve

    # -- the pieces every rule shares ------------------------------------------
    def step(self, read_lr: str = "after") -> GradientTransformation:
        return track_step(self.learning_rate, schedule=self.lr_scheduler,
                          lr_mult=self._resolver(self.lr_mult, False, "lr_mult"),
                          begin_num_update=self.begin_num_update, read_lr=read_lr)

    def rescale(self) -> GradientTransformation:
        return rescale(self.rescale_grad)

    def clip(self) -> GradientTransformation:
        return clip_by_value(self.clip_gradient)

    def add_wd(self) -> GradientTransformation:
        return add_decayed_weights(self.wd, wd_mult=self._resolver(self.wd_mult, True, "wd_mult"))

    def add_wd_from_context(self) -> GradientTransformation:
        """Coupled decay with the per-leaf values an earlier `provide_wd` published."""
        return add_decayed_weights(None)

    def provide_wd(self) -> GradientTransformation:
        return provide_weight_decay(self.wd, wd_mult=self._resolver(self.wd_mult, True, "wd_mult"))

    def build(self, *body: GradientTransformation, read_lr: str = "after") -> GradientTransformation:
        """``chain(step, *body)``, under float32 master weights when
        ``multi_precision``; otherwise float16 parameters warn as in MXNet."""
        # MXNet's SGD, LBSGD and NAG name themselves in the float16 warning
        who = {"mxnet.sgd": "SGD", "mxnet.ccsgd": "SGD", "mxnet.lbsgd": "SGD", "mxnet.nag": "NAG"}.get(self.owner)
        warning = FP16_WARNING.replace("of the optimizer", f"of the {who} optimizer") if who else FP16_WARNING
        return finalize(chain(self.step(read_lr), *body), multi_precision=self.multi_precision,
                        skip_nonfinite=self.skip_nonfinite, fp16_warning=warning, owner=self.owner)


def parse_options(owner: str, learning_rate: float | None, kwargs: dict) -> MXNetOptions:
    """Checks the common keywords at construction: an unknown keyword is a
    TypeError naming it, a value out of range a ValueError naming the range.

    ``learning_rate=None`` (MXNet 1.9.1's base default) means 0.01, or, with
    an ``lr_scheduler``, the scheduler's own ``base_lr``; an explicit value
    becomes the scheduler's base, as MXNet overwrites ``base_lr`` with it.
    """
    unknown = sorted(set(kwargs) - set(COMMON_DEFAULTS))
    if unknown:
        raise TypeError(f"{owner}: unknown keyword argument {unknown[0]!r}; the common keywords are "
                        f"{sorted(COMMON_DEFAULTS)} plus learning_rate and the optimizer's own.")
    o = dict(COMMON_DEFAULTS, **kwargs)
    if learning_rate is None:
        learning_rate = getattr(o["lr_scheduler"], "base_lr", 0.01) if o["lr_scheduler"] else 0.01
    for name, value in (("learning_rate", learning_rate), ("wd", o["wd"]), ("rescale_grad", o["rescale_grad"])):
        check_hyper(owner, name, value)
    check_hyper(owner, "clip_gradient", o["clip_gradient"], allow_none=True)
    check_range(owner, "begin_num_update", o["begin_num_update"], low=0)
    if o["lr_scheduler"] is not None and not callable(o["lr_scheduler"]):
        raise TypeError(f"{owner}(lr_scheduler=...): must be a schedule (a callable of the update "
                        f"count); got {o['lr_scheduler']!r}.")
    idx2name = o["param_idx2name"]
    if idx2name not in (None, True, False) and not isinstance(idx2name, dict):
        raise TypeError(f"{owner}(param_idx2name=...): must be a dict of index -> name, or True; "
                        f"got {type(idx2name).__name__}.")
    for what in ("lr_mult", "wd_mult"):
        m = o[what]
        if m is not None and not isinstance(m, dict) and not callable(m):
            raise TypeError(f"{owner}({what}=...): must be a dict of name or pattern -> multiplier; "
                            f"got {type(m).__name__}.")
    return MXNetOptions(owner=owner, learning_rate=float(learning_rate), wd=float(o["wd"]),
                        rescale_grad=float(o["rescale_grad"]), clip_gradient=o["clip_gradient"],
                        lr_scheduler=o["lr_scheduler"], multi_precision=bool(o["multi_precision"]),
                        begin_num_update=int(o["begin_num_update"]), lr_mult=o["lr_mult"],
                        wd_mult=o["wd_mult"], param_idx2name=idx2name or None,
                        skip_nonfinite=bool(o["skip_nonfinite"]))


def check_unit(owner: str, **values) -> None:
    """Decay rates and momenta: their declared ranges ([0, 1) for MXNet, `gradxform._ranges`)."""
    for name, v in values.items():
        check_hyper(owner, name, v)
