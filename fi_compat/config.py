"""Settings, resolved as: keyword argument, then environment variable, then default.

Every resolved value remembers where it came from, so ``status()`` and
``fi-compat doctor`` can show it.  Invalid values raise :class:`ValueError`
naming the variable (or argument) and what is accepted; nothing is installed
when that happens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

DEFAULT_CACHE_SIZE = 256
"""Bounded-cache capacity.  With the profile-length ladder (see
:func:`fi_compat.adapters.keys.profile_ladder`) a 1M-token context needs about 160 entries, so
256 holds a whole context range without eviction (about 0.5 MiB)."""

MAX_CACHE_SIZE = 1 << 20
POLICIES = ("exact", "bucket", "capacity")
DEFAULT_POLICY = "exact"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from: ``argument``, ``environment`` or ``default``."""

    name: str
    value: Any
    source: str
    env_var: str


def parse_bool(raw: str, what: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{what}={raw!r} is not a boolean; accepted: {', '.join(sorted(_TRUE | _FALSE))} (case-insensitive)"
    )


_ASCII_WHITESPACE = " \t\n\r\f\v"


def check_cache_size(value: object, what: str) -> int:
    """An ``int`` in ``1 .. MAX_CACHE_SIZE``, or a string of ASCII digits
    naming one (surrounding ASCII whitespace is ignored, as a shell or a
    ``.env`` file may leave it).  Signs, underscores, other scripts' digits
    (``int()`` would take ``'+5'``, ``'1_000'`` and ``'٣'``) and non-integers
    raise ``ValueError`` naming ``what`` and what is accepted."""
    accepted = f"accepted: an integer from 1 to {MAX_CACHE_SIZE}"
    if isinstance(value, str):
        digits = value.strip(_ASCII_WHITESPACE)
        if not (digits.isascii() and digits.isdigit()):
            raise ValueError(
                f"{what}={value!r} is not an integer; {accepted}, written with the digits 0-9 only "
                "(no sign, underscore or decimal point; surrounding spaces are ignored)"
            )
        value = int(digits, 10)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}={value!r} ({type(value).__name__}) is not an integer; {accepted}")
    if not 1 <= value <= MAX_CACHE_SIZE:
        raise ValueError(f"{what}={value} is out of range; accepted: 1 to {MAX_CACHE_SIZE}")
    return value


def check_policy(value: object, what: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in POLICIES:
        raise ValueError(f"{what}={value!r} is not a max_seq_len policy; accepted: {', '.join(POLICIES)}")
    return value.strip().lower()


def check_flag(value: object, what: str) -> bool:
    if isinstance(value, str):
        return parse_bool(value, what)
    if not isinstance(value, bool):
        raise ValueError(f"{what}={value!r} is not a boolean; accepted: True or False")
    return value


#: The runtime watch (fi_compat.watch): ``auto`` runs it only where fi_compat's knowledge is
#: missing (a release outside the verified ones, a row missing or mismatched), ``bound`` on
#: every release, ``warn`` on every release without bounding, ``off`` never.
WATCH_MODES = ("auto", "bound", "warn", "off")
DEFAULT_WATCH = "auto"


def check_watch(value: object, what: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in WATCH_MODES:
        raise ValueError(f"{what}={value!r} is not a watch mode; accepted: {', '.join(WATCH_MODES)}")
    return value.strip().lower()


_SPECS: dict[str, tuple[str, Any, Callable[[object, str], Any]]] = {
    # name: (environment variable, default, validator)
    "disable": ("FI_COMPAT_DISABLE", False, check_flag),
    "strict": ("FI_COMPAT_STRICT", False, check_flag),
    "cache_size": ("FI_COMPAT_CACHE_SIZE", DEFAULT_CACHE_SIZE, check_cache_size),
    "max_seq_len_policy": ("FI_COMPAT_MAX_SEQ_LEN_POLICY", DEFAULT_POLICY, check_policy),
    "transparent": ("FI_COMPAT_TRANSPARENT", False, check_flag),
    # the runtime watch (fi_compat.watch): where knowledge is missing, always, reporting only, or never
    "watch": ("FI_COMPAT_WATCH", DEFAULT_WATCH, check_watch),
}


def resolve(name: str, argument: object = None, environ: Mapping[str, str] | None = None) -> Setting:
    """Resolve one setting.  ``argument=None`` means "not given".

    Cost: a dict lookup and one validation; reads ``os.environ`` each call so a
    test or a launcher can change it between installs.
    """
    env_var, default, validate = _SPECS[name]
    if argument is not None:
        return Setting(name, validate(argument, name), "argument", env_var)
    env = os.environ if environ is None else environ
    raw = env.get(env_var)
    if raw is not None and raw.strip() != "":
        return Setting(name, validate(raw, env_var), "environment", env_var)
    return Setting(name, default, "default", env_var)


def resolve_all(environ: Mapping[str, str] | None = None, **arguments: object) -> dict[str, Setting]:
    """Resolve every setting; unknown argument names raise ``TypeError`` like a call would."""
    unknown = set(arguments) - set(_SPECS)
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}; accepted: {', '.join(_SPECS)}")
    settings = {name: resolve(name, arguments.get(name), environ) for name in _SPECS}
    check_consistent(settings)
    return settings


def _spelled(setting: Setting) -> str:
    if setting.source == "argument":
        return f"{setting.name}={setting.value!r} (install() argument)"
    return f"{setting.env_var}={'1' if setting.value else '0'} ({setting.source})"


def check_consistent(settings: Mapping[str, Setting]) -> None:
    """Refuse settings that contradict each other (``ValueError`` naming both).

    ``strict`` asks for "patch flashinfer or raise"; ``FI_COMPAT_DISABLE``
    asks for "leave flashinfer alone".  Honouring either silently would break
    the other's promise, so both together are an error, wherever each came from."""
    disable, strict = settings["disable"], settings["strict"]
    if disable.value and strict.value:
        raise ValueError(
            f"{_spelled(disable)} contradicts {_spelled(strict)}: strict mode promises flashinfer is "
            "patched or an error is raised, FI_COMPAT_DISABLE promises it is left untouched. "
            "Unset FI_COMPAT_DISABLE to use fi_compat, or drop strict to keep it disabled."
        )
