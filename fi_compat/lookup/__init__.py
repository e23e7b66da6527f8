"""Finding flashinfer's functions: one set of rules for the runtime, doctor and the guard.

A function described in :mod:`fi_compat.model.specs` is looked for in one of two places:

* **live** (:func:`find_live`): the modules already imported in this process;
  nothing is imported.  Used by :func:`fi_compat.install` and ``fi-compat doctor``.
* **source** (:func:`find_in_source`): a package directory or a wheel, read
  with :mod:`ast`; nothing is imported or executed.  Used by ``fi-compat guard``,
  ``fi-compat doctor --no-import`` and by the runtime for modules flashinfer
  imports lazily (the cute-dsl kernels), so a verdict exists before they load.

The rules are the same in both places:

1. Look where the spec says the function lives, at every home it names (its
   current module and name, then each earlier one a rename or move left:
   :meth:`~fi_compat.model.spec_model.FunctionSpec.homes`), whatever the release's
   label says: a build's label may lag its code.  :attr:`Found.at` says which.  A
   name that module binds with ``from .elsewhere import name`` (a re-export) is
   followed to its definition.
2. A definition under a module-level ``if``/``try``/``with`` counts; the last
   binding wins, as at import.
3. If no home binds it, every module is searched for a function of one of its
   names (a release that moved it without a spec line); :attr:`Found.moved` says so.
4. The memo decorator is classified: ``unbounded`` (``functools.cache``,
   ``lru_cache(None)``), ``bounded`` (``lru_cache(maxsize=N)``) or ``none``.
   In source, by the module's own names (``from functools import cache as
   _memo``, ``lru_cache(maxsize=CONST)`` with ``CONST = None``:
   :mod:`.source_names`); live, by the ``functools`` cache at the attribute or
   under any stack of decorators over it (:mod:`.memo_site`), whose live
   ``maxsize`` counts.

Live lookups additionally return the object and every module attribute that
holds it (:attr:`Found.aliases`): a patch must replace all of them, or a
caller that imported the name early keeps reaching the original.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional

from packaging.version import Version

from ..model.spec_model import Home
from ..model.specs import FunctionSpec
from .live import aliases_of, describe_callable, find_live, find_live_at, module_loaded
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
    find_at_home,
    find_in_source,
    find_moved,
    module_level_statements,
    resolve_relative,
    source_lookup,
)

Lookup = Callable[[FunctionSpec], Optional[Found]]
"""Finds one spec'd function; :func:`find_live` and :func:`source_lookup`'s result are both one."""


class RuntimeLookup:
    """What the runtime judges by: the live function when its module is imported
    (and not being imported by another thread), else the imported flashinfer
    package's own source, so modules flashinfer imports lazily are judged before
    they load: provisionally, the runtime judges them again, live, when they do.
    :attr:`from_source` names each spec (qualname) a call read from source.

    Each of the spec's homes is looked at in turn, the newest first.  A function
    no home binds is also looked for in every loaded module and in the source of
    every module (a release that moved it into a lazily imported module without a
    re-export), unless the release's label says it lacks the function: a namesake
    found elsewhere there is not it (:func:`fi_compat.verdict.judgement.judge`).
    Never imports anything.  Cost: a parse per module read (tens of ms); the
    moved-function search reads every source file (about 0.1 s), only for a
    missing function."""

    def __init__(self, release: Optional[Version]) -> None:
        self.release = release
        self.from_source: set[str] = set()
        self._index: Optional[SourceIndex] = None

    def _source(self) -> Optional[SourceIndex]:
        if self._index is None:
            package = sys.modules.get(PACKAGE)
            paths = list(getattr(package, "__path__", None) or [])
            if not paths:
                return None
            self._index = SourceIndex(DirectoryReader.for_package_dir(paths[0]))
        return self._index

    def _expected(self, spec: FunctionSpec) -> Optional[FunctionSpec]:
        return spec.at(str(self.release)) if self.release is not None else None

    def _at(self, spec: FunctionSpec, home: Home) -> Optional[Found]:
        """``spec`` at ``home``: live once its module is loaded (what it binds then is
        what counts), else from source."""
        if module_loaded(home.module):
            return find_live_at(spec, home, self._expected(spec))
        sources = self._source()
        found = None if sources is None else find_at_home(sources, home)
        if found is not None:
            self.from_source.add(spec.qualname)
        return found

    def __call__(self, spec: FunctionSpec) -> Optional[Found]:
        self.from_source.discard(spec.qualname)
        for home in spec.homes():
            found = self._at(spec, home)
            if found is not None:
                return found
        found = None
        if self.release is None or spec.present_in(self.release):
            live = find_live(spec, self._expected(spec))
            if live is not None:
                return live  # moved into a loaded module
            sources = self._source()
            found = None if sources is None else find_moved(spec, sources)
            if found is not None and module_loaded(found.defined_in):
                return None  # that module is loaded and binds no such function live
        if found is None and module_loaded(spec.module):
            return None  # its module is loaded and binds nothing: final
        if found is None or found.moved:
            self.from_source.add(spec.qualname)  # settled when the module is imported
        return found

    def waits_for(self, spec: FunctionSpec, found: Optional[Found]) -> Optional[str]:
        """The module whose import settles a verdict read from source, or ``None``
        when it was read live (final).  A moved function waits for the module it
        moved to; otherwise the home's module it was found at (whose attribute a
        patch replaces, bound only once its body has run)."""
        if spec.qualname not in self.from_source:
            return None
        if found is not None and found.at is not None:
            return found.at.module
        return spec.module


def runtime_lookup(release: Optional[Version]) -> RuntimeLookup:
    """A :class:`RuntimeLookup` for ``release``."""
    return RuntimeLookup(release)


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
    "find_at_home",
    "find_in_source",
    "find_live",
    "find_live_at",
    "find_moved",
    "foreign_memo",
    "memo_of_decorator",
    "memo_of_object",
    "module_level_statements",
    "module_loaded",
    "RuntimeLookup",
    "resolve_relative",
    "runtime_lookup",
    "source_lookup",
    "unbounded_memo_decorator",
]
