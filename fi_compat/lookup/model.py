"""What a lookup returns, and how memo decorators are classified (live and in source)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Optional

from ..model.signatures import FoundFunction, Memo
from ..model.spec_model import Home
from ..model.specs import PACKAGE as PACKAGE  # re-exported: the lookup modules read it here
from .memo_site import CacheSite, find_cache
from .source_names import NO_NAMES, ModuleNames, is_unknown

UNBOUNDED = Memo.UNBOUNDED
BOUNDED = Memo.BOUNDED
NO_MEMO = Memo.NONE

TRTLLM_MARKER = "_trtllm_mla_tuning_config_cache"
"""Attribute TensorRT-LLM sets on the builder memo it installs in place of flashinfer's builder."""

_LRU_DEFAULT_MAXSIZE = 128  # functools.lru_cache() with no argument


@dataclass(frozen=True)
class Found:
    """A function as found.  ``function`` describes its parameters and memo;
    ``obj`` and ``aliases`` exist for live lookups only.  ``at``: the module and
    name it was found under: one of the spec's homes (:meth:`FunctionSpec.homes`),
    or, when ``moved``, wherever the search for its name found it."""

    function: FoundFunction
    defined_in: str
    moved: bool = False
    obj: Any = None
    aliases: tuple[tuple[Any, str], ...] = field(default=())
    foreign: Optional[str] = None  # who replaced flashinfer's function, e.g. TensorRT-LLM's workaround
    # For a class member: the attribute's own value (a classmethod object, say)
    # and its descriptor type, which the patch wraps around fi_compat's proxy.
    raw: Any = None
    descriptor: Optional[type] = None
    # The functools cache under a stack of decorators, with the slots that hold it
    # (live lookups only; ``None`` when ``obj`` is the cache or there is none).
    site: Optional[CacheSite] = None
    at: Optional[Home] = None

    @property
    def name(self) -> str:
        """The attribute (or class member) name it was found under."""
        return "" if self.at is None else self.at.name.rsplit(".", 1)[-1]

    @property
    def memo(self) -> str:
        return self.function.memo

    @property
    def maxsize(self) -> Optional[int]:
        return self.function.maxsize

    @property
    def where(self) -> str:
        return self.function.where


def memo_of_decorator(decorator: ast.expr, names: ModuleNames = NO_NAMES) -> tuple[Memo, Optional[int]]:
    """``(kind, maxsize)`` of one decorator expression (or of a call ``cache(f)``'s callee).

    ``names``: the module's aliases of functools' memos and its constants
    (:func:`~fi_compat.lookup.source_names.module_names`), so ``@_memo`` and
    ``lru_cache(maxsize=CONST)`` are read as the module binds them."""
    text = ast.unparse(decorator.func if isinstance(decorator, ast.Call) else decorator)
    name = names.memo_name(text)
    if name == "cache" and not isinstance(decorator, ast.Call):
        return UNBOUNDED, None
    if name == "lru_cache":
        if not isinstance(decorator, ast.Call):  # bare @lru_cache
            return BOUNDED, _LRU_DEFAULT_MAXSIZE
        size: Optional[ast.expr] = decorator.args[0] if decorator.args else None
        for keyword in decorator.keywords:
            if keyword.arg == "maxsize":
                size = keyword.value
        if size is None:
            return BOUNDED, _LRU_DEFAULT_MAXSIZE
        value = names.value(size)
        if is_unknown(value):
            return BOUNDED, None  # computed, or a name the module does not fix: bounded, size unknown here
        if value is None:
            return UNBOUNDED, None
        return BOUNDED, max(int(value), 0)  # lru_cache treats a negative maxsize as 0
    return NO_MEMO, None


def unbounded_memo_decorator(decorator: ast.expr) -> Optional[str]:
    """The decorator's text when it is an unbounded memo, else ``None`` (for the audit)."""
    return ast.unparse(decorator) if memo_of_decorator(decorator)[0] == UNBOUNDED else None


def memo_of_object(obj: Any, name: Optional[str] = None) -> tuple[Memo, Optional[int]]:
    """``(kind, maxsize)`` of a live callable: the ``functools`` cache at it or
    under its decorators (:func:`~fi_compat.lookup.memo_site.find_cache`; below
    the top, only a cache wrapping a function called ``name`` counts).

    A fi_compat proxy is judged by the flashinfer object inside it, so a
    re-install sees what flashinfer shipped, not fi_compat's own bound."""
    site = find_cache(obj, name)
    if site is None:
        return NO_MEMO, None
    try:
        maxsize = site.maxsize
    except Exception:  # noqa: BLE001  (an odd object is simply not a functools cache)
        return NO_MEMO, None
    return (UNBOUNDED, None) if maxsize is None else (BOUNDED, maxsize)


def foreign_memo(obj: Any) -> Optional[str]:
    """Who replaced a flashinfer function with their own memo, if anyone fi_compat knows."""
    seen = 0
    while obj is not None and seen < 16:
        if getattr(obj, TRTLLM_MARKER, False) is True:
            return "TensorRT-LLM's workaround"
        obj = getattr(obj, "__wrapped__", None)
        seen += 1
    return None
