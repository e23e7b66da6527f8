"""The stable call API: :func:`mla_decode` and :func:`build_mla_decode_tuning_config`.

Both take the newest supported release's parameters (0.7.4's, from
:mod:`fi_compat.model.specs`) and call whatever release is installed **by name**
(:mod:`fi_compat.calls.binding`): every value reaches the installed parameter of
that name, positionally only over the prefix where the installed order is
proven the same, by keyword after it.  A keyword the installed release lacks
is dropped at its default and raises
:class:`~fi_compat.errors.UnsupportedFeatureError` otherwise; a signature
that cannot be bound by name raises
:class:`~fi_compat.errors.SignatureMismatchError`; a duplicate, unknown or
missing argument raises ``TypeError`` from fi_compat, the same on every
release.  ``max_seq_len`` is validated (:func:`fi_compat.calls.policy.check_max_seq_len`),
then rewritten by the max_seq_len policy.

The call API installs fi_compat on first use through
:func:`fi_compat.installing.installer.ensure_installed`, which never overrides an
explicit ``install()``/``uninstall()``: after an ``uninstall()`` or a refused
strict install the calls go to the unpatched flashinfer function, still bound
by name and gated.

Cost on the hot path: a dictionary get, an integer compare and one or two
frozenset subset tests over a direct call (``benchmarks/decode_overhead.py``).
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
from typing import Any, Optional

from packaging.version import InvalidVersion, Version

from ..installing import installer
from . import transparent
from .binding import Binding
from ..config import check_policy
from ..adapters.base import Plan
from ..lookup.modules import loaded
from ..errors import DefaultMismatchWarning, UnsupportedReleaseError, UnsupportedReleaseWarning, shortened, warn
from .policy import MAX_SEQ_LEN_LIMIT, apply_max_seq_len_policy, check_max_seq_len
from ..model.specs import CORE_MODULE, DECODE, PUBLIC_MLA_MODULE, TUNING_CONFIG_BUILDER, FunctionSpec

logger = logging.getLogger("fi_compat")

# Everything below derives from the one description in fi_compat.model.specs.
DECODE_DEFAULTS: dict[str, Any] = DECODE.defaults()
DECODE_ORDER: tuple[str, ...] = DECODE.names
MAX_SEQ_LEN_INDEX = DECODE_ORDER.index("max_seq_len")
KV_CACHE_INDEX = DECODE_ORDER.index("kv_cache")
BLOCK_TABLES_INDEX = DECODE_ORDER.index("block_tables")
BUILDER_ORDER: tuple[str, ...] = TUNING_CONFIG_BUILDER.names
BUILDER_MAX_SEQ_LEN_INDEX = BUILDER_ORDER.index("max_seq_len")

DECODE_KIND = "decode"
BUILDER_KIND = "builder"
_KINDS: dict[str, tuple[FunctionSpec, str]] = {
    DECODE_KIND: (DECODE, "fi_compat.mla_decode"),
    BUILDER_KIND: (TUNING_CONFIG_BUILDER, "fi_compat.build_mla_decode_tuning_config"),
}

_lock = threading.Lock()
#: kind -> the Binding for the current installer generation.  The name is
#: kept for benchmarks/decode_overhead.py, which swaps ``.function``.
_mappings: dict[str, Binding] = {}


def _renew_lock_after_fork() -> None:
    # Held by another thread at fork time, the lock would stay held forever in
    # the child (that thread does not exist there) and the next binding
    # rebuild, e.g. after an uninstall/install in the child, would deadlock.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_lock_after_fork)


def _core_module() -> Any:
    """The module holding the decode function: ``flashinfer.mla._core`` from
    0.6.8 on, the plain module ``flashinfer.mla`` before (0.6.4 - 0.6.7.post3
    have no ``_core``).  ``ImportError`` only when flashinfer itself cannot be
    imported: a release without ``_core`` is a release, not a broken host."""
    module = loaded(CORE_MODULE)
    if module is not None:
        return module
    try:
        import flashinfer.mla._core as module  # noqa: PLC0415  (first real use)
    except ImportError as exc:
        public = loaded(PUBLIC_MLA_MODULE)
        if getattr(exc, "name", None) == CORE_MODULE and public is not None and hasattr(public, DECODE.name):
            return public
        raise ImportError(
            f"fi_compat.mla_decode needs flashinfer-python importable on this host ({exc}); "
            "on a CPU-only machine use fi_compat.workload.cpu_host()"
        ) from exc
    return module


def _installed(spec: FunctionSpec, core: Any, release: Any) -> Any:
    """The function ``spec`` names as the installed release has it: at the home the spec gives
    that release, else at any home it declares (a build's label may lag its code: a rename the
    spec writes as one line), the newest one in ``core`` (:func:`_core_module`); ``None`` where
    none holds it."""
    try:
        version: Optional[Version] = Version(str(release)) if release is not None else None
    except InvalidVersion:
        version = None
    for home in (spec.home_in(version), *spec.homes()):
        module = core if home.same_place(spec.home) or home.module == spec.module else loaded(home.module)
        function = getattr(module, home.name, None) if module is not None else None
        if function is not None:
            return function
    return None


def _binding(kind: str) -> Binding:
    """The binding for the installed release, rebuilt when the installer's
    generation moves.  Installs on first use (never over an explicit choice);
    warns once per build about default differences.  Raises the binding's
    ``SignatureMismatchError`` when the installed function cannot be bound."""
    binding = _mappings.get(kind)
    if binding is not None and binding.generation == installer.generation():
        return binding
    installer.ensure_installed()
    built = False
    with _lock:
        core = _core_module()  # importing flashinfer may run fi_compat's post-import hook
        state = installer.snapshot()
        binding = _mappings.get(kind)
        if binding is None or binding.generation != state.generation:
            spec, api_name = _KINDS[kind]
            release = state.release
            if release is None:
                from ..model.release_detection import detect_release  # noqa: PLC0415  (rare: nothing installed)

                release = detect_release()
            function = _installed(spec, core, release)
            if kind == DECODE_KIND and function is not None:
                function = transparent.unwrap(function)
            binding = Binding(
                spec,
                function,
                api_name=api_name,
                release=str(release),
                generation=state.generation,
                policy=state.setting("max_seq_len_policy"),
            )
            _mappings[kind] = binding
            built = True
    message = binding.difference_message() if built else None
    if message is not None:  # a warning, not also a log line (docs/errors.md, "Warnings or logging")
        warn(message, DefaultMismatchWarning)
    if binding.error is not None:
        raise binding.error
    return binding


_MISSING = object()


def _validated_max_seq_len(args: tuple, kwargs: dict, index: int, api_name: str) -> tuple[tuple, dict, int]:
    """The call's max_seq_len as a plain int in range, written back into the
    call when it was another integer type; ``ValueError``/``TypeError`` otherwise."""
    if len(args) > index:
        value = check_max_seq_len(args[index])
        if value is not args[index]:
            args = args[:index] + (value,) + args[index + 1 :]
        return args, kwargs, value
    raw = kwargs.get("max_seq_len", _MISSING)
    if raw is _MISSING:
        raise TypeError(f"{api_name}() missing required argument 'max_seq_len'")
    value = check_max_seq_len(raw)
    if value is not raw:
        kwargs = {**kwargs, "max_seq_len": value}
    return args, kwargs, value


def _apply_policy(args: tuple, kwargs: dict, value: int, policy: str) -> tuple[tuple, dict]:
    """Rewrite max_seq_len under a non-exact policy (shapes are read, never data)."""
    kv_cache = args[KV_CACHE_INDEX] if len(args) > KV_CACHE_INDEX else kwargs.get("kv_cache")
    block_tables = args[BLOCK_TABLES_INDEX] if len(args) > BLOCK_TABLES_INDEX else kwargs.get("block_tables")
    if kv_cache is None or block_tables is None:
        return args, kwargs  # binding reports the missing argument
    page_size = int(kv_cache.shape[-2])
    new_value = apply_max_seq_len_policy(
        value, policy=policy, page_size=page_size, capacity=int(block_tables.shape[-1]) * page_size
    )
    if new_value == value:
        return args, kwargs
    if len(args) > MAX_SEQ_LEN_INDEX:
        return args[:MAX_SEQ_LEN_INDEX] + (new_value,) + args[MAX_SEQ_LEN_INDEX + 1 :], kwargs
    return args, {**kwargs, "max_seq_len": new_value}


def mla_decode(*args: Any, max_seq_len_policy: Optional[str] = None, **kwargs: Any) -> Any:
    """``flashinfer.mla.trtllm_batch_decode_with_kv_cache_mla`` on any supported release.

    Takes 0.7.4's parameters (see ``inspect.signature(mla_decode)``),
    positionally or by keyword, plus the keyword-only ``max_seq_len_policy``
    (``exact``, ``bucket`` or ``capacity``; default from ``install()`` or
    ``FI_COMPAT_MAX_SEQ_LEN_POLICY``), and passes each value to the installed
    parameter of that name.  Installs fi_compat on first use unless the
    process chose otherwise.  Raises, before flashinfer runs: ``ValueError``
    for a ``max_seq_len`` that is not an integer in 1..2**31-1 or an unknown
    policy; ``TypeError`` for a duplicate, unknown or missing argument;
    :class:`~fi_compat.errors.UnsupportedFeatureError` for a non-default
    keyword the installed release lacks;
    :class:`~fi_compat.errors.SignatureMismatchError` when the installed
    function cannot be bound by name.

    Cost: a few dict/set operations over a direct call
    (``benchmarks/decode_overhead.py``); the common path is inlined here up
    to :meth:`~fi_compat.calls.binding.Binding.invoke`, which this and
    :func:`build_mla_decode_tuning_config` share.
    """
    binding = _mappings.get(DECODE_KIND)
    if binding is None or binding.generation != installer.generation():
        binding = _binding(DECODE_KIND)
    value = args[MAX_SEQ_LEN_INDEX] if len(args) > MAX_SEQ_LEN_INDEX else kwargs.get("max_seq_len", _MISSING)
    if type(value) is not int or not 0 < value <= MAX_SEQ_LEN_LIMIT:
        args, kwargs, value = _validated_max_seq_len(args, kwargs, MAX_SEQ_LEN_INDEX, binding.api_name)
    policy = binding.policy if max_seq_len_policy is None else check_policy(max_seq_len_policy, "max_seq_len_policy")
    if policy != "exact":
        args, kwargs = _apply_policy(args, kwargs, value, policy)
    return binding.invoke(args, kwargs)


def build_mla_decode_tuning_config(*args: Any, **kwargs: Any) -> Any:
    """flashinfer's MLA decode tuning-config builder on any supported release,
    through fi_compat's bounded memo when installed.  Takes 0.7.4's parameters
    (``inspect.signature`` shows them), bound by name and gated as for
    :func:`mla_decode`; ``max_seq_len`` is validated and passed as given.
    A release without the builder raises
    :class:`~fi_compat.errors.SignatureMismatchError`."""
    binding = _mappings.get(BUILDER_KIND)
    if binding is None or binding.generation != installer.generation():
        binding = _binding(BUILDER_KIND)
    if len(args) > BUILDER_MAX_SEQ_LEN_INDEX or "max_seq_len" in kwargs:
        args, kwargs, _ = _validated_max_seq_len(args, kwargs, BUILDER_MAX_SEQ_LEN_INDEX, binding.api_name)
    return binding.invoke(args, kwargs)


def _signature(spec: FunctionSpec, extra: tuple[inspect.Parameter, ...] = ()) -> inspect.Signature:
    parameters = [
        inspect.Parameter(
            p.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=inspect.Parameter.empty if p.required else p.default,
        )
        for p in spec.params
    ]
    return inspect.Signature(parameters + list(extra))


mla_decode.__signature__ = _signature(  # type: ignore[attr-defined]
    DECODE, (inspect.Parameter("max_seq_len_policy", inspect.Parameter.KEYWORD_ONLY, default=None),)
)
build_mla_decode_tuning_config.__signature__ = _signature(TUNING_CONFIG_BUILDER)  # type: ignore[attr-defined]


def mla_decode_in_installed_order(*args: Any, **kwargs: Any) -> Any:
    """:func:`mla_decode` for a call written against the *installed* function's
    positional order (transparent mode: the caller called flashinfer), which past
    the prefix shared with the newest order may differ."""
    binding = _mappings.get(DECODE_KIND)
    if binding is None or binding.generation != installer.generation():
        binding = _binding(DECODE_KIND)
    if len(args) > binding.prefix or binding.renames:  # a declared rename: the caller used the installed name
        args, kwargs = binding.from_installed_order(args, kwargs)
    return mla_decode(*args, **kwargs)


def transparent_plan(settings: Any) -> Any:
    """Transparent mode's plan, unless the installed decode function cannot be
    bound by name (a required parameter fi_compat does not know, ...): routing
    flashinfer's callers through the call API would then turn each of their
    working calls into an error.  The function is left as it is, with one
    WARNING naming release, function and difference; strict: the error.
    Cost: one signature comparison."""
    from ..model.release_detection import detect_release  # noqa: PLC0415  (cheap: package metadata)

    core = loaded(CORE_MODULE)
    if core is None:  # 0.6.4 - 0.6.7.post3: no _core, and no tuning-config cache to route around
        message = (
            f"transparent mode not installed: flashinfer-python {detect_release()} has no {CORE_MODULE} "
            "(it arrived in 0.6.8); call fi_compat.mla_decode directly"
        )
        if settings["strict"].value:
            raise UnsupportedReleaseError(str(detect_release()), message)
        warn(message, UnsupportedReleaseWarning, ("transparent", str(detect_release())))
        return Plan()
    function = transparent.unwrap(getattr(core, DECODE.name))
    check = Binding(DECODE, function, api_name=_KINDS[DECODE_KIND][1], release=str(detect_release()))
    if check.error is not None:
        if settings["strict"].value:
            raise check.error
        error = check.error
        difference = getattr(error, "difference", None)
        what = f"{getattr(error, 'qualname', DECODE.qualname)} {difference}" if difference else str(error)
        message = shortened(
            f"transparent mode not installed: {what}",
            keep="; call fi_compat.mla_decode directly (details: fi-compat doctor)",
        )
        warn(message, UnsupportedReleaseWarning, ("transparent", str(detect_release())))
        return Plan()
    return transparent.plan(mla_decode_in_installed_order)
