"""The adapter contract: a :class:`Plan` of patches, applied all-or-nothing.

An adapter is a function ``plan(...) -> Plan`` (``fi_compat.adapters.bounded_memo``
for caches, ``fi_compat.calls.transparent`` for the decode re-exports).  A plan says
which module attributes to replace with which proxy; :meth:`Installation.apply`
puts every plan of an install in place, or none of them: a failure part-way
restores what was already replaced and re-raises, so flashinfer is never left
half-patched.  :meth:`Installation.remove` restores every original object
(``is``-identical).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from types import CellType
from typing import Any, Callable, Optional

from ..memo.cache import BoundedCache

logger = logging.getLogger("fi_compat.adapters")


@dataclass(frozen=True)
class PatchStep:
    """Replace ``original`` with ``proxy`` at every ``(module, attribute)`` in ``targets``.

    ``proxy``: a memo (:func:`fi_compat.memo.proxies.memoized_function`, a plain
    function) or transparent mode's :class:`~fi_compat.memo.proxies.CallThrough`.

    ``targets`` lists every module attribute that held the original (a
    re-export, or a name a module imported early), so no caller keeps reaching it.
    ``before`` runs once before the first replacement (for instance: release
    what flashinfer's unbounded cache already holds).  ``value`` is what the
    attributes are set to when it is not the proxy itself (a classmethod
    around it, for a class member); ``original`` is what they held."""

    name: str
    original: Any
    proxy: Callable[..., Any]
    targets: tuple[tuple[Any, str], ...]
    before: Optional[Callable[[], None]] = None
    value: Any = None

    @property
    def installed_value(self) -> Any:
        return self.proxy if self.value is None else self.value

    def where(self) -> list[str]:
        return [
            f"{self.name} (under a decorator)" if isinstance(owner, CellType) else f"{_name(owner)}.{attribute}"
            for owner, attribute in self.targets
        ]


@dataclass
class Plan:
    """What one adapter would put in place: patches, the caches behind them, and notes."""

    steps: list[PatchStep] = field(default_factory=list)
    caches: dict[str, BoundedCache] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __iadd__(self, other: "Plan") -> "Plan":
        self.steps += other.steps
        self.caches.update(other.caches)
        self.notes += other.notes
        return self


@dataclass
class _Applied:
    step: PatchStep
    replaced: list[tuple[Any, str]]


class Installation:
    """What is in place: every applied step, removable in reverse order."""

    def __init__(self) -> None:
        self._applied: list[_Applied] = []
        self.caches: dict[str, BoundedCache] = {}
        self.notes: list[str] = []

    def apply(self, plan: Plan) -> None:
        """Put ``plan`` in place, all or nothing (on failure the steps of this
        plan already applied are undone, and the error propagates)."""
        done: list[_Applied] = []
        try:
            for step in plan.steps:
                applied = _Applied(step, [])
                done.append(applied)
                if step.before is not None:
                    step.before()
                for owner, attribute in step.targets:
                    setattr(owner, attribute, step.installed_value)
                    applied.replaced.append((owner, attribute))
        except BaseException:
            for applied in reversed(done):
                _restore(applied)
            raise
        self._applied += done
        self.caches.update(plan.caches)
        self.notes += plan.notes

    def patched(self) -> list[str]:
        return [where for applied in self._applied for where in applied.step.where()]

    def steps(self) -> list[PatchStep]:
        return [applied.step for applied in self._applied]

    def remove(self) -> list[str]:
        """Restore every original (``is``-identical) in reverse order.

        An attribute that someone else replaced after fi_compat (TensorRT-LLM's
        workaround installed on top, say) is left to them: fi_compat's proxy,
        still inside their function, becomes a pass-through, and the returned
        list says where."""
        leftovers: list[str] = []
        while self._applied:
            leftovers += _restore(self._applied.pop())
        for cache in self.caches.values():
            cache.clear(keep_statistics=True)
        return leftovers


def _restore(applied: _Applied) -> list[str]:
    leftovers = []
    step = applied.step
    for owner, attribute in reversed(applied.replaced):
        if _current(owner, attribute) is step.installed_value:
            setattr(owner, attribute, step.original)
        else:
            step.proxy.fi_compat_deactivate()
            message = (
                f"{_name(owner)}.{attribute} was replaced after fi_compat installed; "
                "fi_compat's proxy is now a pass-through inside the replacement"
            )
            logger.warning("fi_compat: %s", message)
            leftovers.append(message)
    applied.replaced.clear()
    return leftovers


def _current(owner: Any, attribute: str) -> Any:
    """What ``owner.attribute`` holds now: from ``__dict__``, not getattr (a
    class member's descriptor, not the bound method); a closure cell (a slot in
    a decorator stack) has no ``__dict__`` and answers ``cell_contents``."""
    if isinstance(owner, CellType):
        try:
            return owner.cell_contents
        except ValueError:
            return None
    return vars(owner).get(attribute)


def _name(owner: Any) -> str:
    """``module`` or ``module.Class``, for messages (a closure cell or a
    decorator's ``__wrapped__``: the decorator stack it sits in)."""
    if isinstance(owner, CellType):
        return "a decorator's closure"
    if not isinstance(owner, type) and not hasattr(owner, "__name__"):
        return type(owner).__name__
    if callable(owner) and not isinstance(owner, type) and hasattr(owner, "__qualname__"):
        return f"{getattr(owner, '__module__', '?')}.{owner.__qualname__}"
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}"
    return owner.__name__
