"""The tuning-config builder's memo, specialised to each release's signature.

flashinfer calls the builder (``specs.TUNING_CONFIG_BUILDER``) on every decode (up to
0.7.2.post1, and on 0.7.4 whenever the autotuner chooses), always with every
parameter as a keyword.  A generic ``(*args, **kwargs)`` memo pays, on each of
those calls, for a kwargs dict of 9-15 entries, a lookup of the call's shape
and a gather into the complete argument tuple before it can compute the key.
A function with the builder's own signature pays none of that: Python binds
the keywords straight to its locals, and the key is computed from them.

Each release family's parameters (names, order, defaults) are one row of
:data:`FAMILIES`; the entry is one template (:data:`_TEMPLATE`) written out
with that row's parameter list, so every family runs the same lines.
:func:`fast_entry` returns the factory whose signature equals the installed
builder's, or ``None`` (then the generic memo serves it: slower, equally
correct).  Every entry computes its key with
:func:`fi_compat.adapters.keys.builder_key_of`, the function the generic memo
uses, so both give the same key for the same call; a parameter a family lacks
is ``None`` in the key, as the generic memo's layout gives it.

Cost: writing an entry out (``compile`` of a dozen lines) once per install.
Cost of a hit: the key (two shape reads, one tuple) and one
lock-free cache lookup.  A miss, or a call the key cannot take, costs what the
generic memo's does.  Calls that do not bind raise the ``TypeError`` Python
raises for the original (same function name, same parameters).  A traceback
through an entry shows its lines (they are registered with :mod:`linecache`).
"""

from __future__ import annotations

import inspect
import linecache
from typing import Any, Callable, Optional

from ..memo.cache import MISSING
from ..model.specs import TUNING_CONFIG_BUILDER
from .keys import builder_key_of

Entry = Callable[..., Any]
EntryFactory = Callable[..., Entry]

_REQUIRED = object()
_HEAD = ("kv_cache", "block_tables", "workspace_buffer", "runner_names", "q_len", "num_heads", "kv_lora_rank")

#: Each release family's builder parameters in order, with their defaults (:data:`_REQUIRED`: none).
FAMILIES: dict[str, tuple[tuple[str, Any], ...]] = {
    "0.6.17 - 0.7.4: fifteen parameters": (
        *((name, _REQUIRED) for name in _HEAD),
        ("max_seq_len", _REQUIRED),
        ("device", _REQUIRED),
        ("has_sparse_mla_top_k_lens", False),
        ("cute_dsl_impl", "auto"),
        ("sinks", None),
        ("enable_dcp", False),
        ("cp_world", 1),
        ("cp_rank", 0),
    ),
    "0.6.16 - 0.6.16.post4: eleven parameters (cute_dsl_impl, sinks added)": (
        *((name, _REQUIRED) for name in _HEAD),
        ("max_seq_len", _REQUIRED),
        ("device", _REQUIRED),
        ("cute_dsl_impl", "auto"),
        ("sinks", None),
    ),
    "0.6.13 - 0.6.15.post1 (and TensorRT-LLM's replacement of it): nine parameters, no defaults": (
        *((name, _REQUIRED) for name in _HEAD),
        ("max_seq_len", _REQUIRED),
        ("device", _REQUIRED),
    ),
}

#: The key's parameters beyond the ones every family has, in builder_key_of's order.
_KEYED = ("cute_dsl_impl", "sinks")
_SHAPE = ("q_len", "num_heads", "kv_lora_rank", "has_sparse_mla_top_k_lens", "enable_dcp", "cp_world", "cp_rank")

_TEMPLATE = """\
def {name}({header}):
    if switch.active:
        key = builder_key_of(
            kv_cache, block_tables, workspace_buffer, runner_names, max_seq_len, device,
            {keyed}, ({shape}), batch_cap,
        )
        if key is not None:
            value = lookup(key)
            if value is not MISSING:
                return value
            return fill(key, compute, ({arguments},), {{}}, key)
    return original({arguments})
"""


def _factory(family: str) -> EntryFactory:
    """The entry factory for one row of :data:`FAMILIES`: ``(original, switch, lookup, fill,
    compute, batch_cap=None)`` -> the builder's memo with that family's signature."""
    parameters = FAMILIES[family]
    names = [name for name, _ in parameters]
    defaults = {f"_d_{name}": default for name, default in parameters if default is not _REQUIRED}
    header = ", ".join(name if f"_d_{name}" not in defaults else f"{name}=_d_{name}" for name in names)
    source = _TEMPLATE.format(
        name=TUNING_CONFIG_BUILDER.name,
        header=header,
        keyed=", ".join(name if name in names else "None" for name in _KEYED),
        shape=", ".join(name if name in names else "None" for name in _SHAPE),
        arguments=", ".join(names),
    )
    filename = f"<fi_compat builder entry: {family.split(':')[0]}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)

    def factory(
        original: Callable[..., Any],
        switch: Any,
        lookup: Callable[..., Any],
        fill: Callable[..., Any],
        compute: Callable[..., Any],
        batch_cap: Optional[Callable[..., Optional[int]]] = None,
    ) -> Entry:
        namespace: dict[str, Any] = {
            **defaults,
            "original": original,
            "switch": switch,
            "lookup": lookup,
            "fill": fill,
            "compute": compute,
            "batch_cap": batch_cap,
            "builder_key_of": builder_key_of,
            "MISSING": MISSING,
        }
        exec(code, namespace)  # noqa: S102  (fi_compat's own template, written out above)
        entry: Entry = namespace[TUNING_CONFIG_BUILDER.name]
        return entry

    factory.__doc__ = family
    return factory


ENTRIES = tuple(_factory(family) for family in FAMILIES)


def _parameters(signature: inspect.Signature) -> list[tuple[Any, ...]]:
    """What binding depends on: names, kinds and defaults (annotations do not matter)."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


def _entry_signature(factory: EntryFactory) -> inspect.Signature:
    return inspect.signature(factory(None, None, None, None, None))


def fast_entry(target: Callable[..., Any]) -> Optional[EntryFactory]:
    """The entry factory whose signature equals ``target``'s, else ``None``.

    Cost: one ``inspect.signature`` of the target and of each entry (at install)."""
    try:
        wanted = _parameters(inspect.signature(target))
    except (TypeError, ValueError):
        return None
    for factory in ENTRIES:
        if _parameters(_entry_signature(factory)) == wanted:
            return factory
    return None


__all__ = ["ENTRIES", "FAMILIES", "fast_entry"]
