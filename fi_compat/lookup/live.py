"""Live lookups: functions among the modules already imported (nothing is imported)."""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from typing import Any, Iterator, Optional

from .import_hooks import importing_elsewhere
from .modules import loaded, loaded_names, places
from ..model.signatures import (
    KEYWORD_ONLY,
    POSITIONAL_ONLY,
    POSITIONAL_OR_KEYWORD,
    VAR_KEYWORD,
    VAR_POSITIONAL,
    FoundFunction,
    FoundParam,
)
from ..model.spec_model import Home
from ..model.specs import FunctionSpec, homes
from .memo_site import CacheSite, find_cache
from .model import NO_MEMO, PACKAGE, Found, foreign_memo, memo_of_object


_INSPECT_KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD: POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY: KEYWORD_ONLY,
    inspect.Parameter.VAR_POSITIONAL: VAR_POSITIONAL,
    inspect.Parameter.VAR_KEYWORD: VAR_KEYWORD,
}


def describe_callable(qualname: str, obj: Any, where: str = "") -> FoundFunction:
    """Parameters and memo of a live callable (``inspect.signature`` follows
    ``__wrapped__``: a functools cache or a wrapt proxy shows the original's)."""
    memo, maxsize = memo_of_object(obj, qualname.rsplit(".", 1)[-1])
    if not callable(obj):
        return FoundFunction(qualname, (), NO_MEMO, where=f"not callable: {type(obj).__name__}")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return FoundFunction(qualname, (FoundParam("args", VAR_POSITIONAL, False),), memo, maxsize, where)
    params = tuple(
        FoundParam(p.name, _INSPECT_KINDS[p.kind], p.default is not inspect.Parameter.empty)
        for p in signature.parameters.values()
    )
    return FoundFunction(qualname, params, memo, maxsize, where)


def _flashinfer_modules() -> Iterator[tuple[str, Any]]:
    for name in loaded_names(PACKAGE):
        module = loaded(name)
        if module is not None:
            yield name, module


def aliases_of(obj: Any) -> tuple[tuple[Any, str], ...]:
    """Every ``(module, attribute)`` of an imported flashinfer module that holds ``obj``.

    Cost: :func:`fi_compat.lookup.modules.places` over the loaded flashinfer modules
    (a few milliseconds with 500 modules); install time only."""
    return tuple(
        (owner, attribute) for place in places(obj, PACKAGE) if place is not None for owner, attribute, _ in (place,)
    )


def module_loaded(name: str) -> bool:
    """Whether ``name`` is imported: in ``sys.modules`` and not being imported by
    another thread (whose module has not bound its functions yet)."""
    return sys.modules.get(name) is not None and not importing_elsewhere(name)


def find_live(
    spec: FunctionSpec, expected_params: Optional[FunctionSpec] = None, search_moved: bool = True
) -> Optional[Found]:
    """``spec`` among the imported modules, or ``None`` when nothing binds it: at each
    of its homes (:meth:`FunctionSpec.homes`, the newest first), then (``search_moved``)
    a function of one of its names defined in any other loaded flashinfer module.

    A foreign memo that hides the original's signature (TensorRT-LLM's
    workaround takes ``**kwargs``) is described with the parameters of
    ``expected_params`` (the spec at the installed release): that workaround
    installs only on a builder with exactly those parameters."""
    for home in spec.homes():
        found = find_live_at(spec, home, expected_params)
        if found is not None:
            return found
    if not search_moved:
        return None
    for name in dict.fromkeys(home.name for home in spec.homes() if "." not in home.name):
        obj, defined_in = _search_live(name, homes(name))
        if obj is not None:
            return _found(spec, Home(defined_in, name), obj, defined_in, expected_params, moved=True)
    return None


def find_live_at(spec: FunctionSpec, home: Home, expected_params: Optional[FunctionSpec] = None) -> Optional[Found]:
    """``spec`` at one of its homes in the imported modules, or ``None``."""
    module = sys.modules.get(home.module)
    if module is None:
        return None
    if "." in home.name:
        return _find_member(spec, home, module)
    obj = vars(module).get(home.name)
    if obj is None:
        return None
    defined_in = getattr(inspect.unwrap(obj), "__module__", home.module) or home.module
    return _found(spec, Home(home.module, home.name), obj, defined_in, expected_params)


def _found(
    spec: FunctionSpec,
    at: Home,
    obj: Any,
    defined_in: str,
    expected_params: Optional[FunctionSpec],
    moved: bool = False,
) -> Found:
    foreign = foreign_memo(obj)
    function = describe_callable(at.qualname, obj, where=f"{defined_in}.{at.name}")
    if foreign is not None and not any(p.kind == POSITIONAL_OR_KEYWORD for p in function.params):
        shown = expected_params or spec
        params = tuple(FoundParam(p.name, POSITIONAL_OR_KEYWORD, not p.required) for p in shown.params)
        function = replace(function, params=params, where=f"{function.where} (replaced by {foreign})")
    return Found(function, defined_in, moved, obj, aliases_of(obj), foreign, site=_nested_site(obj, at.name), at=at)


def _find_member(spec: FunctionSpec, home: Home, module: Any) -> Optional[Found]:
    """``Class.member`` of ``module`` (a classmethod/staticmethod is unwrapped; the
    patch puts the same kind of descriptor back around fi_compat's proxy)."""
    owner_name, member = home.name.rsplit(".", 1)
    owner: Any = module
    for part in owner_name.split("."):
        owner = getattr(owner, "__dict__", {}).get(part)
        if not isinstance(owner, type):
            return None
    raw = vars(owner).get(member)
    if raw is None:
        return None
    descriptor = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    obj = raw.__func__ if descriptor is not None else raw
    defined_in = getattr(owner, "__module__", home.module) or home.module
    function = describe_callable(home.qualname, obj, where=f"{defined_in}.{home.name}")
    if descriptor is classmethod and function.params and function.params[0].name != "cls":
        function = replace(function, params=(FoundParam("cls", POSITIONAL_OR_KEYWORD, False), *function.params))
    site = _nested_site(obj, member)
    at = Home(home.module, home.name)
    return Found(function, defined_in, False, obj, ((owner, member),), foreign_memo(obj), raw, descriptor, site, at)


def _nested_site(obj: Any, name: str) -> Optional[CacheSite]:
    """The cache under ``obj``'s decorators, bounded where it sits: its slots in
    the stack plus every module attribute that holds the cache itself."""
    site = find_cache(obj, name)
    if site is None or not site.in_place:
        return None
    return replace(site, holders=site.holders + aliases_of(site.cache))


def _search_live(name: str, skip: frozenset[str]) -> tuple[Any, str]:
    """A function called ``name`` defined in any loaded flashinfer module outside ``skip`` (a moved function)."""
    for module_name, module in _flashinfer_modules():
        if module_name in skip:
            continue
        value = getattr(module, "__dict__", {}).get(name)
        target = inspect.unwrap(value) if callable(value) else None
        if (
            target is not None
            and getattr(target, "__name__", None) == name
            and getattr(target, "__module__", None) == module_name
        ):
            return value, module_name
    return None, ""
