"""What an adapter is, and how its patches are applied and taken back.

An adapter is a class with a one-line verified range, the functions it needs
(:mod:`fi_compat.specs`) and an :meth:`Adapter.plan` that says which
attributes to wrap.  Applying a plan is all-or-nothing: a failure part-way
restores what was already wrapped and re-raises, so flashinfer is never left
half-patched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, ClassVar, Optional

import wrapt.patches
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..cache import BoundedCache
from ..signatures import FunctionSpec
from ..proxies import FiCompatProxy

logger = logging.getLogger("fi_compat.adapters")

TRTLLM_MARKER = "_trtllm_mla_tuning_config_cache"
"""Attribute TensorRT-LLM sets on its replacement builder (written for 0.6.15)."""


def carries_trtllm_marker(obj: object) -> bool:
    """True when ``obj`` or anything it wraps is TensorRT-LLM's memoized builder."""
    seen = 0
    while obj is not None and seen < 16:
        if getattr(obj, TRTLLM_MARKER, False) is True:
            return True
        obj = getattr(obj, "__wrapped__", None)
        seen += 1
    return False


@dataclass
class PatchStep:
    """Wrap ``module.attribute`` with ``factory(original)``."""

    module: ModuleType
    attribute: str
    factory: Callable[[Any], FiCompatProxy]
    before_wrap: Optional[Callable[[Any], None]] = None  # e.g. release the unbounded cache

    @property
    def qualname(self) -> str:
        return f"{self.module.__name__}.{self.attribute}"


@dataclass
class AppliedPatch:
    module: ModuleType
    attribute: str
    original: Any
    handle: FiCompatProxy

    @property
    def qualname(self) -> str:
        return f"{self.module.__name__}.{self.attribute}"


@dataclass
class Installation:
    """What one install put in place; :meth:`remove` takes it all back."""

    adapter: "type[Adapter]"
    patches: list[AppliedPatch] = field(default_factory=list)
    caches: dict[str, BoundedCache] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def apply(cls, adapter: "type[Adapter]", steps: list[PatchStep], caches: dict[str, BoundedCache],
              notes: list[str]) -> "Installation":
        installation = cls(adapter, [], caches, notes)
        try:
            for step in steps:
                original = getattr(step.module, step.attribute)
                if step.before_wrap is not None:
                    step.before_wrap(original)
                handle = wrapt.patches.wrap_object(step.module, step.attribute, step.factory)
                installation.patches.append(AppliedPatch(step.module, step.attribute, original, handle))
        except BaseException:
            installation.remove()
            raise
        return installation

    def remove(self) -> list[str]:
        """Restore every original (``is``-identical) in reverse order.  A proxy
        that someone else has wrapped wholesale cannot be taken out; it becomes
        a pass-through and the returned list says where."""
        leftovers: list[str] = []
        while self.patches:
            patch = self.patches.pop()
            try:
                wrapt.patches.unwrap_object(patch.module, patch.attribute, patch.handle)
            except (wrapt.patches.WrapperNotFoundError, wrapt.patches.WrapperNotOutermostError) as exc:
                patch.handle.fi_compat_deactivate()
                message = (
                    f"{patch.qualname} was replaced by another wrapper after fi_compat installed "
                    f"({type(exc).__name__}); fi_compat's proxy is now a pass-through inside it"
                )
                logger.warning("fi_compat: %s", message)
                leftovers.append(message)
        for cache in self.caches.values():
            cache.clear()
        return leftovers


class Adapter:
    """Base of the per-family adapters.  Subclasses set the class attributes
    and implement :meth:`plan`; they hold no state of their own."""

    name: ClassVar[str]
    verified: ClassVar[SpecifierSet]
    functions: ClassVar[tuple[FunctionSpec, ...]]
    summary: ClassVar[str]

    @classmethod
    def covers(cls, version: Optional[Version]) -> bool:
        """Whether ``version`` lies in the verified range.  Pre-releases never
        do (``>=0.6.18`` must not claim ``0.6.18rc1``); local labels are
        ignored by ``packaging`` as usual (``0.6.18+cu130`` is ``0.6.18``)."""
        return version is not None and cls.verified.contains(version, prereleases=False)

    @classmethod
    def probe(cls, module: ModuleType) -> Optional[str]:
        """Feature probe run before patching: ``None`` when the functions behave
        as the adapter expects, otherwise what differs."""
        return None

    @classmethod
    def plan(cls, module: ModuleType, maxsize: int) -> tuple[list[PatchStep], dict[str, BoundedCache], list[str]]:
        raise NotImplementedError


def returns_tuning_config(value: object) -> Optional[str]:
    """Probe helper: ``None`` when ``value`` looks like flashinfer's TuningConfig."""
    if type(value).__name__ == "TuningConfig" and hasattr(value, "dynamic_tensor_specs"):
        return None
    return f"returns {type(value).__module__}.{type(value).__qualname__}, expected TuningConfig"


def probe_tuning_config(qualname: str, call: Callable[[], object]) -> Optional[str]:
    """Run ``call`` once; ``None`` when it returns a TuningConfig, otherwise
    what went wrong, prefixed with ``qualname`` (an exception is a finding,
    never an escape: behaviour can change under an unchanged signature)."""
    try:
        value = call()
    except Exception as exc:
        return f"{qualname} raised {type(exc).__name__}: {exc}"
    problem = returns_tuning_config(value)
    return None if problem is None else f"{qualname} {problem}"
