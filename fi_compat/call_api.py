"""The stable call API: :func:`mla_decode` and :func:`build_mla_decode_tuning_config`.

Both take the newest supported release's parameters (0.7.4) and map them onto
whatever release is installed:

* positional arguments keep their meaning: every release appends new
  parameters after 0.6.13's 22, so a prefix of the newest order is valid
  everywhere up to the installed release's length;
* a parameter the installed release lacks is dropped when it carries its
  default, and raises :class:`~fi_compat.errors.UnsupportedFeatureError`
  (naming the keyword, the release that added it and the installed one)
  otherwise: never a ``TypeError`` from inside flashinfer;
* ``max_seq_len`` is validated, then rewritten by the max_seq_len policy
  (``fi_compat.policy``).

Cost on the hot path: a few dictionary and set operations (about a
microsecond; ``benchmarks/decode_overhead.py`` measures it against a direct
call).
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
from typing import Any, Callable, Optional

from . import installer, transparent
from .specs import CORE_MODULE, DECODE, TUNING_CONFIG_BUILDER
from .config import check_policy
from .errors import UnsupportedFeatureError
from .policy import MAX_SEQ_LEN_LIMIT, apply_max_seq_len_policy, check_max_seq_len

_NO_DEFAULT = inspect.Parameter.empty

# Everything below derives from the one description in fi_compat.specs.
DECODE_DEFAULTS: dict[str, Any] = DECODE.defaults()
DECODE_ORDER: tuple[str, ...] = DECODE.names
DECODE_KEYWORD_ADDED_IN: dict[str, str] = DECODE.added_in_map()
MAX_SEQ_LEN_INDEX = DECODE_ORDER.index("max_seq_len")

BUILDER_ORDER: tuple[str, ...] = TUNING_CONFIG_BUILDER.names
BUILDER_DEFAULTS: dict[str, Any] = TUNING_CONFIG_BUILDER.defaults()
BUILDER_KEYWORD_ADDED_IN: dict[str, str] = TUNING_CONFIG_BUILDER.added_in_map()
BUILDER_MAX_SEQ_LEN_INDEX = BUILDER_ORDER.index("max_seq_len")


def _is_default(value: Any, default: Any) -> bool:
    # Never compare tensors with ==: only plain scalars count as "the default".
    if value is default:
        return True
    return type(value) in (int, float, str, bool) and type(value) is type(default) and value == default


class _Mapping:
    """How the newest signature maps onto one installed function."""

    def __init__(self, function: Callable, newest_order: tuple[str, ...], defaults: dict[str, Any],
                 added_in: dict[str, str], release: Optional[str], generation: int, policy: str) -> None:
        self.function = function
        self.generation = generation
        self.policy = policy
        parameters = inspect.signature(function).parameters
        self.accepted = frozenset(parameters)
        self.positional_limit = sum(
            1 for p in parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        )
        self.newest_order = newest_order
        self.defaults = defaults
        self.added_in = added_in
        self.release = release

    def split(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Gate arguments the installed release lacks; returns what to pass."""
        if len(args) > self.positional_limit:
            if len(args) > len(self.newest_order):
                raise TypeError(
                    f"takes at most {len(self.newest_order)} positional arguments ({len(args)} given)"
                )
            extra = dict(zip(self.newest_order[self.positional_limit:], args[self.positional_limit:]))
            args = args[: self.positional_limit]
            kwargs = {**extra, **kwargs}
        if kwargs.keys() <= self.accepted:
            return args, kwargs
        kept = {}
        for name, value in kwargs.items():
            if name in self.accepted:
                kept[name] = value
            elif name in self.defaults:
                if not _is_default(value, self.defaults[name]):
                    raise UnsupportedFeatureError(name, self.added_in.get(name), self.release)
            else:
                raise TypeError(
                    f"unexpected keyword argument {name!r}; accepted: {', '.join(self.newest_order)}"
                )
        return args, kept


_lock = threading.Lock()
_mappings: dict[str, _Mapping] = {}


def _renew_lock_after_fork() -> None:
    # Held by another thread at fork time, the lock would stay held forever in
    # the child (that thread does not exist there) and the next mapping
    # rebuild, e.g. after an uninstall/install in the child, would deadlock.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


def _core_module() -> Any:
    module = sys.modules.get(CORE_MODULE)
    if module is not None:
        return module
    try:
        import flashinfer.mla._core as module  # noqa: PLC0415  (first real use)
    except ImportError as exc:
        raise ImportError(
            f"fi_compat.mla_decode needs flashinfer-python importable on this host ({exc}); "
            "on a CPU-only machine use fi_compat.testing.cpu_host()"
        ) from exc
    return module


def _mapping(kind: str) -> _Mapping:
    """The mapping for the installed release, rebuilt when install state changes."""
    mapping = _mappings.get(kind)
    if mapping is not None and mapping.generation == installer.generation():
        return mapping
    state = installer.ensure_installed()
    with _lock:
        generation = state.generation
        core = _core_module()
        release = None if state.release is None else str(state.release)
        policy = state.setting("max_seq_len_policy")
        if kind == "decode":
            target = transparent.unwrap(getattr(core, DECODE.name))
            mapping = _Mapping(target, DECODE_ORDER, DECODE_DEFAULTS, DECODE_KEYWORD_ADDED_IN, release,
                               generation, policy)
        else:
            mapping = _Mapping(getattr(core, TUNING_CONFIG_BUILDER.name), BUILDER_ORDER, BUILDER_DEFAULTS,
                               BUILDER_KEYWORD_ADDED_IN, release, generation, policy)
        _mappings[kind] = mapping
        return mapping


_MISSING = object()


def _max_seq_len_of(args: tuple, kwargs: dict) -> int:
    """The call's max_seq_len, validated (``ValueError``/``TypeError`` otherwise)."""
    value = args[MAX_SEQ_LEN_INDEX] if len(args) > MAX_SEQ_LEN_INDEX else kwargs.get("max_seq_len", _MISSING)
    if type(value) is int and 0 < value <= MAX_SEQ_LEN_LIMIT:
        return value
    if value is _MISSING:
        raise TypeError("missing required argument 'max_seq_len'")
    return check_max_seq_len(value)  # raises, naming the accepted range


def _apply_policy(args: tuple, kwargs: dict, value: int, policy: str) -> tuple[tuple, dict]:
    """Rewrite max_seq_len under a non-exact policy."""
    kv_cache = args[1] if len(args) > 1 else kwargs["kv_cache"]
    block_tables = args[6] if len(args) > 6 else kwargs["block_tables"]
    page_size = int(kv_cache.shape[-2])
    new_value = apply_max_seq_len_policy(
        value, policy=policy, page_size=page_size, capacity=int(block_tables.shape[-1]) * page_size
    )
    if new_value == value:
        return args, kwargs
    if len(args) > MAX_SEQ_LEN_INDEX:
        return args[:MAX_SEQ_LEN_INDEX] + (new_value,) + args[MAX_SEQ_LEN_INDEX + 1:], kwargs
    return args, {**kwargs, "max_seq_len": new_value}


def mla_decode(*args: Any, max_seq_len_policy: Optional[str] = None, **kwargs: Any) -> Any:
    """``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` on any supported release.

    Takes 0.7.4's parameters (see ``inspect.signature(mla_decode)``),
    positionally or by keyword, plus the keyword-only ``max_seq_len_policy``
    (``exact``, ``bucket`` or ``capacity``; default from ``install()`` or
    ``FI_COMPAT_MAX_SEQ_LEN_POLICY``).  Installs fi_compat on first use if it
    is not installed.  Raises ``ValueError`` for an invalid ``max_seq_len``
    or policy and :class:`~fi_compat.errors.UnsupportedFeatureError` for a
    non-default keyword the installed release lacks, before flashinfer runs.

    Cost: about a microsecond over a direct call (``benchmarks/decode_overhead.py``);
    the common path is inlined here for that reason.
    """
    mapping = _mappings.get("decode")
    if mapping is None or mapping.generation != installer.generation():
        mapping = _mapping("decode")
    value = _max_seq_len_of(args, kwargs)
    if max_seq_len_policy is not None:
        policy = check_policy(max_seq_len_policy, "max_seq_len_policy")
    else:
        policy = mapping.policy
    if policy != "exact":
        args, kwargs = _apply_policy(args, kwargs, value, policy)
    if len(args) > mapping.positional_limit or not kwargs.keys() <= mapping.accepted:
        args, kwargs = mapping.split(args, kwargs)
    return mapping.function(*args, **kwargs)


def build_mla_decode_tuning_config(*args: Any, **kwargs: Any) -> Any:
    """flashinfer's MLA decode tuning-config builder on any supported release,
    through fi_compat's bounded memo.  Takes 0.7.4's parameters
    (``inspect.signature`` shows them); gating as for :func:`mla_decode`.
    ``max_seq_len`` is validated and passed as given."""
    mapping = _mapping("builder")
    if len(args) > BUILDER_MAX_SEQ_LEN_INDEX:
        check_max_seq_len(args[BUILDER_MAX_SEQ_LEN_INDEX])
    elif "max_seq_len" in kwargs:
        check_max_seq_len(kwargs["max_seq_len"])
    args, kwargs = mapping.split(args, kwargs)
    return mapping.function(*args, **kwargs)


def _signature(order: tuple[str, ...], defaults: dict[str, Any], extra: tuple[inspect.Parameter, ...] = ()) -> inspect.Signature:
    parameters = [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults.get(name, _NO_DEFAULT))
        for name in order
    ]
    return inspect.Signature(parameters + list(extra))


mla_decode.__signature__ = _signature(  # type: ignore[attr-defined]
    DECODE_ORDER, DECODE_DEFAULTS,
    (inspect.Parameter("max_seq_len_policy", inspect.Parameter.KEYWORD_ONLY, default=None),),
)
build_mla_decode_tuning_config.__signature__ = _signature(BUILDER_ORDER, BUILDER_DEFAULTS)  # type: ignore[attr-defined]
