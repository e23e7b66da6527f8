"""Finding flashinfer's functions: one set of rules for the runtime, doctor and the guard.

A function described in :mod:`fi_compat.specs` is looked for in one of two places:

* **live** (:func:`find_live`): the modules already imported in this process;
  nothing is imported.  Used by :func:`fi_compat.install` and ``fi-compat doctor``.
* **source** (:func:`find_in_source`): a package directory or a wheel, read
  with :mod:`ast`; nothing is imported or executed.  Used by ``fi-compat guard``,
  ``fi-compat doctor --no-import`` and by the runtime for modules flashinfer
  imports lazily (the cute-dsl kernels), so a verdict exists before they load.

The rules are the same in both places:

1. Look where the spec says the function lives.  A name that module binds with
   ``from .elsewhere import name`` (a re-export) is followed to its definition.
2. A definition under a module-level ``if``/``try``/``with`` counts; the last
   binding wins, as at import.
3. If the module does not bind the name at all, every module is searched for a
   function of that name (a release that moved it); :attr:`Found.moved` says so.
4. The memo decorator is classified: ``unbounded`` (``functools.cache``,
   ``lru_cache(None)``), ``bounded`` (``lru_cache(maxsize=N)``) or ``none``.

Live lookups additionally return the object and every module attribute that
holds it (:attr:`Found.aliases`): a patch must replace all of them, or a
caller that imported the name early keeps reaching the original.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

from packaging.version import Version

from ..specs import FunctionSpec
from .live import aliases_of, describe_callable, find_live, module_loaded
from .model import (
    BOUNDED,
    NO_MEMO,
    PACKAGE,
    TRTLLM_MARKER,
    UNBOUNDED,
    Found,
    foreign_memo,
    memo_of_decorator,
    memo_of_object,
    unbounded_memo_decorator,
)
from .source import (
    DirectoryReader,
    SourceIndex,
    SourceReader,
    describe_def,
    find_in_source,
    module_level_statements,
    resolve_relative,
    source_lookup,
)

Lookup = Callable[[FunctionSpec], Optional[Found]]
"""Finds one spec'd function; :func:`find_live` and :func:`source_lookup`'s result are both one."""


def runtime_lookup(release: Optional[Version]) -> Lookup:
    """What the runtime judges by: the live function when its module is imported,
    else the imported flashinfer package's own source (modules flashinfer imports
    lazily are judged before they load).  Never imports anything."""

    def find(spec: FunctionSpec) -> Optional[Found]:
        if module_loaded(spec.module):
            return find_live(spec, spec.at(str(release)) if release is not None else None)
        package = sys.modules.get(PACKAGE)
        paths = list(getattr(package, "__path__", None) or [])
        if not paths:
            return None
        return find_in_source(spec, SourceIndex(DirectoryReader.for_package_dir(paths[0])), search_moved=False)

    return find


__all__ = [
    "BOUNDED",
    "DirectoryReader",
    "Found",
    "Lookup",
    "NO_MEMO",
    "PACKAGE",
    "SourceIndex",
    "SourceReader",
    "TRTLLM_MARKER",
    "UNBOUNDED",
    "aliases_of",
    "describe_callable",
    "describe_def",
    "find_in_source",
    "find_live",
    "foreign_memo",
    "memo_of_decorator",
    "memo_of_object",
    "module_level_statements",
    "module_loaded",
    "resolve_relative",
    "runtime_lookup",
    "source_lookup",
    "unbounded_memo_decorator",
]
