"""How a call of the stable API reaches the installed flashinfer function: by name.

The caller's arguments are bound to the newest signature's names
(:mod:`fi_compat.model.specs`: positional arguments in the newest order), then passed
so that every value reaches the installed parameter of that name:

* positionally only over the prefix where the installed positional order is,
  name for name, the newest order (:attr:`Binding.prefix`, computed once);
* by keyword after it (keyword-only parameters included);
* a parameter the spec declares renamed (``Param.renamed_from``) is passed
  under the name the installed release uses;
* a parameter the installed function lacks, or the spec declares removed
  (``Param.removed_in``), is dropped when it carries its default and raises
  :class:`~fi_compat.errors.UnsupportedFeatureError` otherwise;
* a parameter whose installed default differs from the documented one gets
  the documented default passed explicitly when the caller omits it (one
  WARNING when the binding is built, from :mod:`fi_compat.calls.call_api`).

An installed function that cannot be called safely by name (a required
parameter fi_compat does not know, a required one it needs missing, a
positional-only parameter off the shared prefix, no readable signature)
gives a binding whose every call raises
:class:`~fi_compat.errors.SignatureMismatchError` before flashinfer runs.

Cost: building reads ``inspect.signature`` once (tens of microseconds).  The
call API's functions (``call_api.mla_decode``, ``build_mla_decode_tuning_config``)
call :meth:`Binding.invoke`, whose fast path uses :attr:`Binding.direct_limit`,
:attr:`Binding.direct_keywords` and :attr:`Binding.required_after`: one length
comparison and one or two frozenset subset tests.  Everything else (duplicate
or unknown arguments, gating, moving arguments to keywords) is :meth:`Binding.call`,
reached only when that test fails.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

from packaging.version import InvalidVersion, Version

from ..errors import FiCompatError, SignatureMismatchError, UnsupportedFeatureError, shortened
from ..model.specs import REQUIRED, FunctionSpec

_EMPTY = inspect.Parameter.empty
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_SCALARS = (int, float, str, bool, type(None))


def is_default(value: Any, default: Any) -> bool:
    """Whether ``value`` counts as the parameter's default.  Tensors are never
    compared with ``==``: only the same object or an equal plain scalar counts."""
    if value is default:
        return True
    return type(value) in _SCALARS and type(value) is type(default) and value == default


def same_default(installed: Any, documented: Any) -> bool:
    """Whether two defaults are the same value (``1`` and ``1.0`` are; tensors only if identical)."""
    if installed is documented:
        return True
    numeric = (int, float)
    if type(installed) in numeric and type(documented) in numeric:
        return installed == documented
    return type(installed) in _SCALARS and type(installed) is type(documented) and installed == documented


def _version(release: Optional[str]) -> Optional[Version]:
    """``release`` as a public version (``None`` when unknown or unreadable: the newest)."""
    try:
        return None if release is None else Version(Version(release).public)
    except InvalidVersion:
        return None


def _describe(parameter: inspect.Parameter) -> str:
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "")
    default = "" if parameter.default is _EMPTY else "=…"
    kind = {
        inspect.Parameter.POSITIONAL_ONLY: " (positional-only)",
        inspect.Parameter.KEYWORD_ONLY: " (keyword-only)",
    }.get(parameter.kind, "")
    return f"{prefix}{parameter.name}{default}{kind}"


class Binding:
    """The newest signature of ``spec`` mapped onto one installed ``function``.

    ``api_name`` names the stable entry point in errors (``fi_compat.mla_decode``);
    ``generation`` and ``policy`` are the installer state it was built for
    (:mod:`fi_compat.calls.call_api` rebuilds when the generation moves).
    ``function=None`` means the installed release has no such function.
    """

    def __init__(
        self,
        spec: FunctionSpec,
        function: Optional[Callable],
        *,
        api_name: str,
        release: Optional[str],
        generation: int = 0,
        policy: Optional[str] = None,
    ) -> None:
        self.spec = spec
        self.function = function
        self.api_name = api_name
        self.release = release
        self.generation = generation
        self.policy = policy
        self.names: tuple[str, ...] = spec.names
        self.known = frozenset(self.names)
        self.defaults = spec.defaults()
        self.added_in = spec.added_in_map()
        self.required = tuple(p.name for p in spec.params if p.required)
        self.version = _version(release)
        #: Current name -> the installed release's name, for declared renames.
        self.renames = spec.installed_names(self.version)
        #: Current name -> removed_in, for declared removals this release has seen.
        self.removed = spec.removed_at(self.version)
        #: 1 + the position of the last required parameter: a call with at
        #: least this many positional arguments cannot miss a required one.
        self.required_count = 1 + max((self.names.index(n) for n in self.required), default=-1)
        self.required_after = tuple(
            frozenset(n for n in self.required if self.names.index(n) >= count) for count in range(len(self.names) + 1)
        )
        self.error: Optional[FiCompatError] = None
        self.differences: list[str] = []  # default differences, for the WARNING
        self.explicit_defaults: dict[str, Any] = {}
        self.accepted: frozenset[str] = frozenset()
        self.installed_positional: tuple[str, ...] = ()
        self.positional_only: tuple[str, ...] = ()
        self.prefix = 0
        self._analyse()
        fast = self.error is None and not self.explicit_defaults
        by_keyword = self.accepted - frozenset(self.positional_only) - frozenset(self.renames)
        #: Longest positional call passed on as it is (-1: no fast path).
        self.direct_limit = self.prefix if fast else -1
        #: For n positional arguments: the keywords a call may pass on as they are.
        self.direct_keywords = tuple(by_keyword - frozenset(self.names[:count]) for count in range(self.prefix + 1))

    # ------------------------------------------------------------------ building

    def _mismatch(self, found: Optional[list[str]], difference: str) -> None:
        self.error = SignatureMismatchError(
            self.spec.qualname, self.spec.expected_text(), found, self.release, difference
        )

    def _analyse(self) -> None:
        if self.function is None:
            if self.spec.added_in is not None and self._predates(self.spec.added_in):
                self.error = UnsupportedFeatureError.release_predates(
                    self.api_name, self.spec.qualname, self.spec.added_in, self.release
                )
                return
            self._mismatch(None, "is missing (moved or removed)")
            return
        try:
            parameters = list(inspect.signature(self.function).parameters.values())
        except (TypeError, ValueError) as exc:
            self._mismatch(None, f"has no signature fi_compat can read ({exc})")
            return
        found = [_describe(p) for p in parameters]
        current = {installed: name for name, installed in self.renames.items()}  # undo declared renames
        named = {current.get(p.name, p.name): p for p in parameters if p.kind not in _VARIADIC}
        positional = [current.get(p.name, p.name) for p in parameters if p.kind in _POSITIONAL]
        self.installed_positional = tuple(positional)
        self.accepted = (frozenset(named) & self.known) - frozenset(self.removed)
        prefix = 0
        while prefix < min(len(positional), len(self.names)) and positional[prefix] == self.names[prefix]:
            prefix += 1
        self.prefix = prefix
        problems = [
            f"gained required parameter {name!r}, which fi_compat does not know"
            for name, p in named.items()
            if name not in self.known and p.default is _EMPTY
        ]
        problems += [
            f"has no parameter {name!r}, which the call API requires (renamed or removed)"
            for name in self.required
            if name not in named
        ]
        last_positional_only = -1
        for index, name in enumerate(positional):
            if named[name].kind is inspect.Parameter.POSITIONAL_ONLY:
                if index >= prefix:
                    problems.append(
                        f"parameter {name!r} became positional-only at position {index + 1}, "
                        "where the call API's order differs"
                    )
                last_positional_only = index
        if problems:
            self._mismatch(found, "; ".join(problems))
            return
        self.positional_only = tuple(positional[: last_positional_only + 1])
        for name, parameter in named.items():
            documented = self.defaults.get(name, REQUIRED)
            if name not in self.known or documented is REQUIRED:
                continue
            if parameter.default is _EMPTY:
                self.explicit_defaults[name] = documented
                self.differences.append(f"{name!r} has no default (the call API documents {documented!r})")
            elif not same_default(parameter.default, documented):
                self.explicit_defaults[name] = documented
                self.differences.append(
                    f"{name!r} defaults to {parameter.default!r} (the call API documents {documented!r})"
                )

    def _predates(self, added_in: str) -> bool:
        """Whether the installed release is older than ``added_in`` (an unreadable release: no)."""
        try:
            return self.release is not None and Version(Version(self.release).public) < Version(added_in)
        except InvalidVersion:
            return False

    def difference_message(self) -> Optional[str]:
        """The WARNING text for default differences, or ``None``."""
        if not self.differences:
            return None
        return shortened(
            f"flashinfer-python {self.release}: {self.spec.qualname}: {'; '.join(self.differences)}",
            keep=f"; {self.api_name} passes that one when omitted",
        )

    # ------------------------------------------------------------------ calling

    def bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Name -> value for the newest signature; ``TypeError`` (from
        fi_compat, the same on every release) for too many positional
        arguments, a duplicate, an unknown keyword or a missing required one."""
        names = self.names
        if len(args) > len(names):
            raise TypeError(f"{self.api_name}() takes at most {len(names)} positional arguments ({len(args)} given)")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name in values:
                raise TypeError(
                    f"{self.api_name}() got multiple values for argument {name!r}: "
                    f"positional argument {names.index(name) + 1} and the keyword {name}="
                )
            if name not in self.known:
                raise TypeError(
                    f"{self.api_name}() got an unexpected keyword argument {name!r}; accepted: {', '.join(names)}"
                )
            values[name] = value
        missing = [name for name in self.required if name not in values]
        if missing:
            listed = ", ".join(repr(name) for name in missing)
            raise TypeError(f"{self.api_name}() missing required argument{'s' if len(missing) > 1 else ''} {listed}")
        return values

    def invoke(self, args: tuple, kwargs: dict) -> Any:
        """A call of the call API: passed on as it is when it needs no binding (at
        most :attr:`direct_limit` positional arguments, keywords among
        :attr:`direct_keywords`, every required argument there: one length
        comparison and one or two frozenset subset tests), else :meth:`call`."""
        count = len(args)
        if (
            count <= self.direct_limit
            and kwargs.keys() <= self.direct_keywords[count]
            and (count >= self.required_count or self.required_after[count] <= kwargs.keys())
        ):
            return self.function(*args, **kwargs)  # type: ignore[misc]
        return self.call(args, kwargs)

    def call(self, args: tuple, kwargs: dict) -> Any:
        """The general path: bind, gate, pass by name.  Raises before
        flashinfer runs for every error it reports."""
        if self.error is not None:
            raise self.error
        values = self.bind(args, kwargs)
        for name, default in self.explicit_defaults.items():
            values.setdefault(name, default)
        keywords = {}
        for name, value in values.items():
            if name in self.accepted:
                keywords[name] = value
            elif name in self.removed and not is_default(value, self.defaults.get(name, REQUIRED)):
                raise UnsupportedFeatureError.removed(name, self.removed[name], self.release, self.spec.qualname)
            elif not is_default(value, self.defaults.get(name, REQUIRED)):
                raise UnsupportedFeatureError(name, self.added_in.get(name), self.release, self.spec.qualname)
        positional = [keywords.pop(name) if name in keywords else self.defaults[name] for name in self.positional_only]
        if self.renames:
            keywords = {self.renames.get(name, name): value for name, value in keywords.items()}
        return self.function(*positional, **keywords)  # type: ignore[misc]

    def from_installed_order(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """A call written for the *installed* function (a caller of a patched
        flashinfer attribute, in transparent mode) as a call in the newest
        order: positional arguments past the shared prefix become keywords
        (and keywords under a declared rename's installed name get the current name)."""
        if self.renames:
            current = {installed: name for name, installed in self.renames.items()}
            kwargs = {current.get(name, name): value for name, value in kwargs.items()}
        if len(args) <= self.prefix:
            return args, kwargs
        qualname = self.spec.qualname
        if self.error is not None:
            raise self.error
        if len(args) > len(self.installed_positional):
            raise TypeError(
                f"{qualname}() takes at most {len(self.installed_positional)} positional arguments ({len(args)} given)"
            )
        moved = dict(zip(self.installed_positional[self.prefix :], args[self.prefix :]))
        for name in moved:
            if name in kwargs:
                raise TypeError(f"{qualname}() got multiple values for argument {name!r}")
        return args[: self.prefix], {**kwargs, **moved}
