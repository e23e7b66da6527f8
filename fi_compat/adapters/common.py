"""Key logic shared by both adapter families.

The builder's output is fully determined by a few scalars (docs/design.md
lists each one and why nothing else matters); these helpers compute them from
a call without touching tensor data, only ``.shape`` and sizes.
"""

from __future__ import annotations

import inspect
import operator
from typing import Any, Callable, Hashable, Mapping, Optional

PROFILE_LADDER_BITS = 4
"""Significant bits kept by :func:`profile_ladder`: 8 values per doubling,
never more than 12.5 % below the input.  For a 1,048,576-token context that is
at most 8 * 20 + 16 = 176 distinct profile lengths."""


def profile_ladder(length: int) -> int:
    """Round ``length`` *down* to its top :data:`PROFILE_LADDER_BITS` bits.

    Why down: ``profile_seq_len`` fills the synthetic ``seq_lens`` that the
    autotuner profiles with, while the runner is built with the caller's
    ``max_seq_len``.  A profile length above ``max_seq_len`` would break the
    kernel's ``max_seq_len >= max(seq_lens)`` contract during profiling; one a
    little below it only profiles a slightly shorter sequence of the same
    autotuner bucket (the tuned-result key rounds ``max_seq_len`` *up* to a
    power of two, so the whole bucket shares one tactic anyway).
    """
    if length < (1 << PROFILE_LADDER_BITS):
        return length
    shift = length.bit_length() - PROFILE_LADDER_BITS
    return (length >> shift) << shift


def as_int(value: Any) -> Optional[int]:
    """``value`` as an ``int`` (ints, numpy and 0-d integer types), else ``None``."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


class ArgumentBinder:
    """Turn ``(args, kwargs)`` into a name -> value mapping for one signature.

    flashinfer calls the builder with keywords only, so the fast path is a dict
    copy plus defaults; positional calls fall back to ``Signature.bind``.
    Returns ``None`` for a call that does not bind (flashinfer then raises its
    own ``TypeError`` when the call goes through).
    """

    def __init__(self, function: Callable) -> None:
        self.signature = inspect.signature(function)
        self.names = tuple(self.signature.parameters)
        self.defaults = {
            name: p.default
            for name, p in self.signature.parameters.items()
            if p.default is not inspect.Parameter.empty
        }

        self.accepted = frozenset(self.names)
        self.required = frozenset(self.names) - frozenset(self.defaults)

    def bind(self, args: tuple, kwargs: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        """Name -> value for the call.  A keyword-only call returns ``kwargs``
        itself (no copy): absent optional parameters then read as missing,
        which keys can treat as "default"; call :meth:`complete` for values."""
        if not args:
            keys = kwargs.keys()
            return kwargs if keys >= self.required and keys <= self.accepted else None
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        return bound.arguments

    def complete(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` with every omitted parameter at its default."""
        return {**self.defaults, **values}


# Builder parameters that enter the key as they are (absent ones read as None).
_SCALAR_KEY_NAMES = ("q_len", "num_heads", "kv_lora_rank", "has_sparse_mla_top_k_lens", "enable_dcp",
                     "cp_world", "cp_rank")


def builder_key(values: Mapping[str, Any]) -> Optional[Hashable]:
    """The memo key of ``_build_mla_decode_tuning_config`` (both families).

    Components, each read from a shape or a scalar:

    * ``num_pages = kv_cache.shape[0]``: seeds the block-table initializer;
    * ``page_size = kv_cache.shape[-2]`` and ``width = block_tables.shape[-1]``:
      with max_seq_len they give ``profile_seq_len`` (and width is the sparse
      top-k width from 0.6.17 on);
    * ``profile_ladder(min(max_seq_len, width * page_size))``: see
      :func:`profile_ladder`;
    * ``runner_names``, ``q_len``, ``num_heads``, ``kv_lora_rank``: inputs of
      ``_compute_mla_decode_buckets``;
    * the sparse flag and DCP triple (0.6.17 on), ``None`` where absent;
    * only when ``"cute-dsl"`` is a runner: the workspace size in bytes, the
      device (its SM count), the exact ``max_seq_len`` and ``cute_dsl_impl``,
      because the cute-dsl batch cap is computed from them.  A cute-dsl call
      with ``sinks`` is not memoized (``None``): the cap may depend on them.

    Tensor *data* never matters: the builder reads shapes only.  Returns
    ``None`` for a call it cannot key (missing or odd arguments); the call
    then goes to flashinfer unmemoized, which raises its own error if any.

    Cost: this runs on every decode call, so it reads each shape once and
    builds one tuple (about a microsecond).
    """
    try:
        kv_shape = values["kv_cache"].shape
        width = values["block_tables"].shape[-1]
        max_seq_len = values["max_seq_len"]
        runners = tuple(values["runner_names"])
        page_size = kv_shape[-2]
        num_pages = kv_shape[0]
    except (KeyError, AttributeError, IndexError, TypeError):
        return None
    if type(max_seq_len) is not int:
        max_seq_len = as_int(max_seq_len)
        if max_seq_len is None:
            return None
    profile = min(max_seq_len, width * page_size)
    if profile >= 1 << PROFILE_LADDER_BITS:
        shift = profile.bit_length() - PROFILE_LADDER_BITS
        profile = (profile >> shift) << shift
    get = values.get
    cute: Optional[tuple] = None
    if "cute-dsl" in runners:
        if get("sinks") is not None:
            return None
        workspace = get("workspace_buffer")
        try:
            workspace_bytes = workspace.numel() * workspace.element_size()
        except AttributeError:
            return None
        cute = (workspace_bytes, get("device"), max_seq_len, get("cute_dsl_impl"))
    return (num_pages, page_size, width, profile, runners, cute, *map(get, _SCALAR_KEY_NAMES))


def normalized_profile_max_seq_len(values: Mapping[str, Any]) -> int:
    """The ``max_seq_len`` to hand a 0.6.13-0.6.15 builder so that the
    ``profile_seq_len`` it computes equals the key's laddered value (the
    builder uses max_seq_len for nothing else in those releases)."""
    page_size = int(values["kv_cache"].shape[-2])
    width = int(values["block_tables"].shape[-1])
    return profile_ladder(min(as_int(values["max_seq_len"]) or 0, width * page_size))


def call_key(binder: ArgumentBinder, key: Callable[[Mapping[str, Any]], Optional[Hashable]]
             ) -> Callable[[tuple, dict], Optional[Hashable]]:
    """``key`` applied to a call's arguments, for :class:`~fi_compat.proxies.MemoizedFunction`.

    flashinfer calls the builder with keywords only; that path checks the
    names with two set comparisons and hands ``kwargs`` over without copying.
    """
    accepted, required = binder.accepted, binder.required
    every = len(accepted)

    def call_key_(args: tuple, kwargs: dict) -> Optional[Hashable]:
        if args:
            values = binder.bind(args, kwargs)
            return None if values is None else key(values)
        names = kwargs.keys()
        # flashinfer passes every parameter: then one subset test proves both.
        if names <= accepted and (len(names) == every or names >= required):
            return key(kwargs)
        return None

    return call_key_
