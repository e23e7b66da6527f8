"""Every memo reachable from flashinfer's modules, however it is written.

:mod:`fi_compat.counting.census` counts ``functools`` caches on module attributes and
class members.  This walk is a second, independent eye: from each loaded
flashinfer module it follows module attributes, class dictionaries, the
instances flashinfer's objects hold (their ``__dict__``), closures,
``__wrapped__`` chains (a cache under any stack of ``functools.wraps``
decorators), static/class methods and properties, and the values of small
dictionaries, and lists every

* ``functools`` cache wrapper (``kind == "functools"``), with its size and bound;
* dict-like object (``dict``, ``OrderedDict``, ``defaultdict``, weak
  dictionaries; ``kind == "dict"``) held by a flashinfer module, class,
  instance or closure: a memo written by hand looks like any other dict, so
  every one is listed and only growth between two walks singles one out.

fi_compat's own proxies are listed as ``owner == "fi_compat"`` and the
flashinfer cache inside each stays listed as flashinfer's.  Each memo carries
``where``, the ``file:line`` of the function or class it belongs to.

Cost: one walk of flashinfer 0.7.4 (about 5,700 memos) took 0.56-0.9 s on a
loaded 2-core host, 0.5 s for 0.6.18, 3-5 times one functools census
(``benchmarks/memo_census.py`` prints both); never on a hot path.
Failure: an object whose attributes raise is skipped, never reported.
"""

from __future__ import annotations

import _thread
import collections
import gc
import sys
import types
import weakref
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional

from ..lookup.modules import loaded
from ..model.specs import PACKAGE

FLASHINFER = PACKAGE
FI_COMPAT = "fi_compat"
FUNCTOOLS = "functools"
DICT = "dict"
#: Dictionaries with more entries than this are counted, their values not walked (cost).
WALK_VALUES_UP_TO = 256
MAX_DEPTH = 8
_LOCAL = _thread._local
DICT_TYPES = (
    dict,
    collections.OrderedDict,
    collections.defaultdict,
    weakref.WeakKeyDictionary,
    weakref.WeakValueDictionary,
)


@dataclass(frozen=True)
class Memo:
    """One memo: the path it was first reached by, its kind, size, bound and owner."""

    path: str
    kind: str  # "functools" or "dict"
    owner: str  # "flashinfer" or "fi_compat"
    size: int
    maxsize: Optional[int]  # functools caches: None is unbounded; dicts: always None
    where: str  # "file:line" of the function or class it belongs to ("" when unknown)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "owner": self.owner,
            "size": self.size,
            "maxsize": self.maxsize,
            "where": self.where,
        }


def _flashinfer_name(name: Any) -> bool:
    return isinstance(name, str) and (name == PACKAGE or name.startswith(PACKAGE + "."))


def _is_cache(value: Any) -> bool:
    """A ``functools``-style cache: ``cache_info`` and ``cache_clear`` on a function, or on the
    type of anything else (an instance's own ``__getattr__`` is never asked: flashinfer keeps lazy
    objects whose every attribute loads a CUDA library)."""
    holder = value if isinstance(value, types.FunctionType) else type(value)
    try:
        return callable(getattr(holder, "cache_info", None)) and callable(getattr(holder, "cache_clear", None))
    except Exception:  # noqa: BLE001  (an object whose attributes raise is no cache)
        return False


def _is_fi_compat(value: Any) -> bool:
    """A fi_compat memo (a function) or proxy (its class says so)."""
    holder = value if isinstance(value, types.FunctionType) else type(value)
    try:
        return getattr(holder, "_fi_compat_wrapper", False) is True
    except Exception:  # noqa: BLE001
        return False


def _code_where(function: Any) -> str:
    code = getattr(inspect_unwrap(function), "__code__", None)
    if isinstance(code, types.CodeType):
        return f"{code.co_filename}:{code.co_firstlineno}"
    return ""


def inspect_unwrap(function: Any) -> Any:
    """``function`` with its ``__wrapped__`` chain followed (at most 32 links;
    never raises, unlike :func:`inspect.unwrap` on a cycle)."""
    for _ in range(32):
        try:
            inner = getattr(function, "__wrapped__", None)
        except Exception:  # noqa: BLE001
            return function
        if inner is None or inner is function:
            return function
        function = inner
    return function


def _class_where(cls: type) -> str:
    for item in vars(cls).values():
        item = getattr(item, "__func__", item)
        code = getattr(item, "__code__", None)
        if isinstance(code, types.CodeType):
            return f"{code.co_filename}:{code.co_firstlineno}"
    module = loaded(getattr(cls, "__module__", ""))
    return f"{getattr(module, '__file__', '')}:1" if module is not None else ""


def _module_where(module: Any) -> str:
    return f"{getattr(module, '__file__', '') or ''}:1"


def _flashinfer_function(value: Any) -> bool:
    return isinstance(value, (types.FunctionType, types.MethodType)) and _flashinfer_name(
        getattr(value, "__module__", None)
    )


def _flashinfer_instance(value: Any) -> bool:
    cls = type(value)
    return _flashinfer_name(getattr(cls, "__module__", None)) and not isinstance(value, (type, types.ModuleType))


def _function_attributes(function: types.FunctionType) -> Optional[dict[str, Any]]:
    """A function's attribute dictionary if it has one, without creating it.

    Reading ``function.__dict__`` creates an empty dictionary on every function
    that never had an attribute set (about 17,800 on 0.7.4, 1.1 MB): the walk
    finds the existing one among the function's references instead.  Its other
    dictionaries are its globals, its builtins, its keyword defaults and, once
    something read them, its annotations, whose keys are its parameter names and
    ``return``: a dictionary of only such keys is taken for the annotations (a
    function attribute so named is not followed)."""
    known = (function.__globals__, function.__builtins__, function.__kwdefaults__)
    code = function.__code__
    parameters = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]) | {"return"}
    for referent in gc.get_referents(function):
        if type(referent) is dict and not any(referent is other for other in known):
            if referent and not all(isinstance(key, str) and key in parameters for key in referent):
                return referent
            if "__wrapped__" in referent:
                return referent
    return None


def _instance_links(value: Any, named: bool) -> Iterator[tuple[str, Any]]:
    """An instance's attributes: by name (``named``; an instance that keeps them
    inline then gets a dictionary of them built, as any reader of ``vars()`` does:
    about 64 bytes each), else as the garbage collector sees them, which builds
    nothing (the runtime watch: its attribute dictionary where it has one, else
    its attributes' values)."""
    if named:
        attributes = getattr(value, "__dict__", None)
        if isinstance(attributes, dict):
            yield from attributes.copy().items()
            return
    cls = type(value)
    for item in gc.get_referents(value):
        if item is not cls:
            yield "[attribute]", item


def _children(value: Any, named: bool = True) -> Iterator[tuple[str, Any]]:
    """``(name, child)`` of the links the walk follows out of ``value``; nothing it
    reads creates an attribute on flashinfer's objects (``named``: an instance's
    attributes by name, see :func:`_instance_links`)."""
    if isinstance(value, (staticmethod, classmethod)):
        yield "", value.__func__
        return
    if isinstance(value, property):
        yield "fget", value.fget
        return
    if isinstance(value, types.MethodType):
        yield "__func__", value.__func__
        return
    if isinstance(value, _LOCAL):  # the running thread's attributes (the decode thread's, mostly)
        yield from vars(value).copy().items()
        return
    if isinstance(value, type):
        for name, item in vars(value).copy().items():
            if not (name.startswith("__") and name.endswith("__")) or name == "__wrapped__":
                yield name, item
        return
    if isinstance(value, DICT_TYPES):
        try:
            if len(value) <= WALK_VALUES_UP_TO:
                for key, item in value.copy().items():
                    yield f"[{key!r}]" if isinstance(key, (str, int)) else "[...]", item
        except Exception:  # noqa: BLE001  (a dict that changes while read: skip its values this time)
            return
        return
    if isinstance(value, (set, list, tuple, frozenset, types.ModuleType)):
        return
    if _flashinfer_instance(value) and not _is_cache(value) and not _is_fi_compat(value):
        yield from _instance_links(value, named)  # its own attributes only: its __getattr__ is never asked
        return
    wrapped = getattr(value, "__wrapped__", None)
    if wrapped is not None:
        yield "__wrapped__", wrapped
    original = getattr(value, "_fi_compat_original", None) if _is_fi_compat(value) else None
    if original is not None:
        yield "_fi_compat_original", original
    if isinstance(value, types.FunctionType):
        for index, cell in enumerate(value.__closure__ or ()):
            try:
                yield f"<closure {value.__code__.co_freevars[index]}>", cell.cell_contents
            except ValueError:  # an empty cell
                continue
        attributes = _function_attributes(value)
        if attributes is not None:
            for name, item in attributes.copy().items():
                if name not in ("__wrapped__", "__doc__", "__module__", "__qualname__", "__name__", "__annotations__"):
                    yield name, item


_TYPE_DECISION: dict[type, bool] = {}
_SPECIAL = (types.FunctionType, types.MethodType, type, types.ModuleType, staticmethod, classmethod, property)


def _worth_following(value: Any) -> bool:
    cls = type(value)
    decided = _TYPE_DECISION.get(cls)
    if decided is not None:
        return decided
    if cls is types.FunctionType:
        return _flashinfer_name(getattr(value, "__module__", None)) or _is_fi_compat(value)
    if cls is types.MethodType:
        return _flashinfer_function(value)
    if isinstance(value, type):
        return _flashinfer_name(getattr(value, "__module__", None))
    if isinstance(value, _SPECIAL):
        # modules: each flashinfer module is a root of its own, other packages are not walked
        return not isinstance(value, types.ModuleType)
    # everything else is decided by its type alone: a dict, a functools cache, an instance of flashinfer's
    decision = (
        issubclass(cls, DICT_TYPES + (set, list, _LOCAL))
        or callable(getattr(cls, "cache_info", None))
        or _flashinfer_name(getattr(cls, "__module__", None))
    )
    _TYPE_DECISION[cls] = decision
    return decision


Node = tuple[str, Any, str, int]
"""One object the walk reaches: ``(path, value, where, depth)``; ``where`` is the
``file:line`` of the function or class it belongs to, ``depth`` 1 for a module attribute."""


def module_nodes(
    module_name: str, module: Any, seen: set[int], only: Optional[str] = None, *, named: bool = True, own: bool = False
) -> Iterator[Node]:
    """Every object worth following that ``module``'s attributes reach, depth
    first, each once per ``seen`` (which it fills: one set for a walk of every
    module, a fresh one to walk a module alone).  A generator, so a caller can
    walk a slice at a time and resume (the runtime watch); ``only``: from that one
    attribute of the module; ``named=False``: paths and ``where`` left empty (no
    string is built); ``own``: the functions and classes another module defines are
    left to that module's walk (what a module re-exports is not walked twice).
    Reads nothing that creates an attribute on flashinfer's objects; an object
    whose attributes raise is not walked."""

    def wanted(value: Any) -> bool:
        # decided once per object; a rejected object is never worth following (the test reads the object)
        if id(value) in seen:
            return False
        seen.add(id(value))
        return _worth_following(value)

    def elsewhere(value: Any) -> bool:
        return own and isinstance(value, (type, types.FunctionType)) and getattr(value, "__module__", None) != module_name

    where_module = _module_where(module) if named else ""
    stack = [
        (f"{module_name}.{name}" if named else "", item, 1, where_module)
        for name, item in reversed(getattr(module, "__dict__", {}).copy().items())
        if (only is None or name == only)
        and not (name.startswith("__") and name.endswith("__"))
        and not elsewhere(item)
        and wanted(item)
    ]
    while stack:
        path, value, depth, context = stack.pop()
        yield path, value, context, depth
        if depth >= MAX_DEPTH:
            continue
        here = _context(value, context) if named else ""
        try:
            links = [(name, child) for name, child in _children(value, named) if wanted(child)]
        except Exception:  # noqa: BLE001  (an object whose attributes raise: not walked)
            continue
        for name, child in reversed(links):
            if named:
                child_path = f"{path}.{name}" if name and not name.startswith("[") else f"{path}{name}"
            else:
                child_path = ""
            stack.append((child_path, child, depth + 1, here))


def walk(modules: Optional[Mapping[str, Any]] = None) -> dict[str, Memo]:
    """Every memo reachable from the loaded flashinfer modules, by the path it
    was first reached by (modules in name order, so paths are stable between
    walks).  ``modules`` defaults to ``sys.modules``."""
    source = sys.modules if modules is None else modules
    found: dict[str, Memo] = {}
    seen: set[int] = set()
    roots: set[int] = set()
    for module_name in sorted(name for name in list(source) if _flashinfer_name(name)):
        module = source.get(module_name)
        if module is None or id(module) in roots:
            continue
        roots.add(id(module))  # its own set: a module another one imported was rejected as a link, not as a root
        for path, value, context, _depth in module_nodes(module_name, module, seen):
            memo = _memo(path, value, context)
            if memo is not None:
                found[path] = memo
    return found


def _memo(path: str, value: Any, context: str) -> Optional[Memo]:
    """``value`` as a memo, if it is one."""
    if _is_fi_compat(value):
        size, maxsize = _cache_size(value)
        return Memo(path, FUNCTOOLS, FI_COMPAT, size, maxsize, _code_where(value))
    if _is_cache(value):
        size, maxsize = _cache_size(value)
        return Memo(path, FUNCTOOLS, FLASHINFER, size, maxsize, _code_where(value) or context)
    if isinstance(value, DICT_TYPES):
        try:
            return Memo(path, DICT, FLASHINFER, len(value), None, context)
        except Exception:  # noqa: BLE001
            return None
    return None


def _context(value: Any, context: str) -> str:
    """The ``where`` the objects ``value`` links to inherit."""
    if isinstance(value, type):
        return _class_where(value)
    if isinstance(value, types.FunctionType):
        return _code_where(value)
    if _flashinfer_instance(value):
        return _class_where(type(value))
    return context


def _cache_size(value: Any) -> tuple[int, Optional[int]]:
    try:
        info = value.cache_info()
        return int(info.currsize), info.maxsize
    except Exception:  # noqa: BLE001
        return 0, None


@dataclass(frozen=True)
class MemoGrowth:
    before: int
    after: Memo

    @property
    def gained(self) -> int:
        return self.after.size - self.before

    def as_dict(self) -> dict[str, Any]:
        return {**self.after.as_dict(), "gained": self.gained}


def grown(
    before: Mapping[str, Memo], after: Mapping[str, Memo], owners: tuple[str, ...] = (FLASHINFER,)
) -> list[MemoGrowth]:
    """Memos of ``owners`` holding more entries in ``after`` than in ``before``
    (new ones count from zero), largest gain first."""
    out = []
    for path, memo in after.items():
        previous = before.get(path)
        size = previous.size if previous is not None else 0
        if memo.owner in owners and memo.size > size:
            out.append(MemoGrowth(size, memo))
    return sorted(out, key=lambda g: (-g.gained, g.after.path))


__all__ = ["DICT", "FUNCTOOLS", "Memo", "MemoGrowth", "Node", "grown", "inspect_unwrap", "module_nodes", "walk"]
