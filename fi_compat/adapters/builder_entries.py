"""The tuning-config builder's memo, specialised to each release's signature.

flashinfer calls the builder (``specs.TUNING_CONFIG_BUILDER``) on every decode (up to
0.7.2.post1, and on 0.7.4 whenever the autotuner chooses), always with every
parameter as a keyword.  A generic ``(*args, **kwargs)`` memo pays, on each of
those calls, for a kwargs dict of 9-15 entries, a lookup of the call's shape
and a gather into the complete argument tuple before it can compute the key.
A function with the builder's own signature pays none of that: Python binds
the keywords straight to its locals, and the key is computed from them.

Each form the builder's parameters have taken (names, order, defaults) is one
row of :data:`FAMILIES`, read from :data:`fi_compat.model.specs.TUNING_CONFIG_BUILDER`
(:meth:`~fi_compat.model.spec_model.FunctionSpec.forms`: one per release that
changed them); the entry is one template (:data:`_TEMPLATE`) written out with
that row's parameter list, so every family runs the same lines.
:func:`fast_entry` returns the factory whose signature equals the installed
builder's, or ``None`` (then the generic memo serves it: slower, equally
correct).  Every entry computes its key with
:func:`fi_compat.adapters.keys.builder_key_of`, the function the generic memo
uses, so both give the same key for the same call; a parameter a family lacks
is ``None`` in the key, as the generic memo's layout gives it.  The entries know
nothing of the runtime watch: whether it runs is the installer's to decide.

Cost: writing an entry out (``compile`` of a dozen lines) once per install.
Cost of a hit: the key (two shape reads, one tuple) and one lock-free cache
lookup.  A miss, or a call the key cannot take, costs what the
generic memo's does.  Calls that do not bind raise the ``TypeError`` Python
raises for the original (same function name, same parameters).  A traceback
through an entry shows its lines (they are registered with :mod:`linecache`).
"""

from __future__ import annotations

import inspect
import linecache
from typing import Any, Callable, Optional

from ..memo.cache import MISSING
from ..model.spec_model import REQUIRED
from ..model.specs import TUNING_CONFIG_BUILDER
from .keys import builder_key_of

Entry = Callable[..., Any]
EntryFactory = Callable[..., Entry]

#: Each form of the builder's parameters in order, with their defaults (``REQUIRED``: none), by
#: the release that first had it; TensorRT-LLM's replacement takes the first (nine, no defaults).
FAMILIES: dict[str, tuple[tuple[str, Any], ...]] = {
    f"from {release}: {len(form.params)} parameters": tuple((p.name, p.default) for p in form.params)
    for release, form in TUNING_CONFIG_BUILDER.forms()
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
    defaults = {f"_d_{name}": default for name, default in parameters if default is not REQUIRED}
    header = ", ".join(name if f"_d_{name}" not in defaults else f"{name}=_d_{name}" for name in names)
    entry_name = TUNING_CONFIG_BUILDER.name  # the entry keeps the name it was written with
    source = _TEMPLATE.format(
        name=entry_name,
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
        entry: Entry = namespace[entry_name]
        return entry

    factory.__doc__ = family
    return factory


ENTRIES = tuple(_factory(family) for family in reversed(FAMILIES))  # the newest form first: the likeliest


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
