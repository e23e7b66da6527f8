"""The autotuner's bucket matcher, memoized on the dimensions it reads.

``AutoTuner._find_nearest_profile`` (0.6.13 - 0.6.17) and its memo
``_find_nearest_profile_cached`` (0.6.18 on) run one body on every release:
copy the call's shapes, give every dimension a dynamic spec names the bucket
of the *first* dimension it names, set every dimension a constraint names to
-1, and pass every other dimension through, unread.  SGLang's block table is
``[batch, pages of the batch's longest request]``: its width is such a
dimension and changes with nearly every batch, so a memo keyed on the shapes
misses on 88 - 98 % of SGLang's decode calls (docs/benchmarks.md).

This memo keys on what the search reads (:class:`Reads`): the length of every
shape and the dimensions the specs read first, under one token for the specs.
On a miss it asks flashinfer's own function about the shapes with every
other dimension 0 and keeps that answer (:class:`Answer`); each call gets it
back with its own passed-through dimensions.  The answers equal flashinfer's
on random shapes, specs and constraints (tests/matrix/test_bucket_match.py).

Cost of a hit: one identity lookup for the specs, the shapes' lengths, one
cache lookup, and one tuple per shape for the answer (about 1 us for
SGLang's four shapes, CPU host).  A call it cannot key (no specs, shapes
without lengths, an unhashable dimension) goes to the row's bounded fallback.
"""

from __future__ import annotations

import threading
from operator import add, getitem
from typing import Any, Callable, Hashable, Optional

from ..memo.cache import MISSING
from .keys import closure_value
from .layout import ArgumentLayout

SPEC_SETS_KEPT = 256
"""Distinct spec sets :class:`SpecIndex` interns before it starts again: a model
has a handful (one per tuning config shape), and the memo's keys keep theirs alive."""


class Reads:
    """What the search reads of a call under one set of specs and constraints,
    and what it overwrites: ``read`` the (input, dimension) each dynamic spec
    reads, ``written`` every (input, dimension) a spec or constraint sets.

    Hashes by identity: :class:`SpecIndex` hands out one object per distinct
    set (by value), and the memo's keys hold it."""

    __slots__ = ("read", "written", "_only")

    def __init__(self, read: tuple[tuple[int, int], ...], written: tuple[tuple[int, int], ...]) -> None:
        self.read = read
        self.written = written
        self._only = read[0] if len(read) == 1 else None  # one spec (every MLA config): no loop per call

    def key(self, shapes: Any) -> tuple[Any, ...]:
        """The memo key of ``shapes``: this object, every shape's length and the
        dimensions read.  Raises ``TypeError`` / ``IndexError`` for shapes the
        search could not read (the caller then takes the fallback)."""
        if self._only is not None:
            i, d = self._only
            return (self, tuple(map(len, shapes)), shapes[i][d])
        return (self, tuple(map(len, shapes)), *[shapes[i][d] for i, d in self.read])

    def masked(self, shapes: Any) -> tuple[tuple[Any, ...], ...]:
        """``shapes`` with every dimension the search does not read set to 0."""
        masked = [[0] * len(shape) for shape in shapes]
        for i, d in self.read:
            masked[i][d] = shapes[i][d]
        return tuple(map(tuple, masked))

    def answer(self, profile: Any, lengths: tuple[int, ...]) -> "Answer":
        """Keep flashinfer's ``profile`` for the masked shapes of ``lengths``,
        with where each call's own dimensions go back."""
        count = len(lengths)
        written: list[set[int]] = [set() for _ in lengths]
        for i, d in self.written:  # negative indices as Python's lists read them
            row = i % count
            written[row].add(d % lengths[row])
        return Answer(tuple(map(tuple, profile)), tuple(written), lengths)


class Answer:
    """flashinfer's answer for one key, and how to complete it for a call.

    Per shape, the dimensions the search wrote come from the answer and the
    others from the call.  When the written ones lead each shape (the batch
    dimension, in every config flashinfer's MLA decode builds) that is one
    tuple concatenation per shape, ``answer[:k] + call[k:]``, and the entry
    keeps only those heads."""

    __slots__ = ("_heads", "_tails", "_profile", "_masks")

    def __init__(self, profile: tuple[tuple[Any, ...], ...], written: tuple[set[int], ...], lengths: tuple[int, ...]):
        leading = tuple(len(dims) for dims in written)
        self._heads: Optional[tuple[tuple[Any, ...], ...]] = None
        self._tails: Optional[tuple[slice, ...]] = None
        self._profile: Optional[tuple[tuple[Any, ...], ...]] = None
        self._masks: Optional[tuple[tuple[bool, ...], ...]] = None
        if all(dims == set(range(k)) for dims, k in zip(written, leading)):
            self._heads = tuple(shape[:k] for shape, k in zip(profile, leading))
            self._tails = _tails(leading)
        else:
            self._profile = profile
            self._masks = tuple(tuple(d in dims for d in range(n)) for dims, n in zip(written, lengths))

    def for_tuples(self, shapes: tuple[Any, ...]) -> Optional[tuple[tuple[Any, ...], ...]]:
        """The answer for ``shapes`` where every shape is a tuple (``torch.Size``
        is) and the written dimensions lead; ``None`` otherwise."""
        if self._heads is None or self._tails is None:
            return None
        try:
            return tuple(map(add, self._heads, map(getitem, shapes, self._tails)))
        except TypeError:  # a shape that is a list
            return None

    def for_call(self, shapes: Any) -> tuple[tuple[Any, ...], ...]:
        """The answer flashinfer gives for ``shapes``: this one, with the call's
        own passed-through dimensions."""
        if self._heads is not None and self._tails is not None:
            return tuple(head + tuple(shape[tail]) for head, tail, shape in zip(self._heads, self._tails, shapes))
        assert self._profile is not None and self._masks is not None
        return tuple(
            tuple(a if w else c for a, w, c in zip(written, mask, shape))
            for written, mask, shape in zip(self._profile, self._masks, shapes)
        )


_TAILS: dict[tuple[int, ...], tuple[slice, ...]] = {}


def _tails(leading: tuple[int, ...]) -> tuple[slice, ...]:
    """The slices past each shape's written head, shared by the answers of one
    structure (a handful per process; past :data:`SPEC_SETS_KEPT` built per answer)."""
    tails = _TAILS.get(leading)
    if tails is None:
        tails = tuple(slice(k, None) for k in leading)
        if len(_TAILS) < SPEC_SETS_KEPT:
            _TAILS[leading] = tails
    return tails


class SpecIndex:
    """One :class:`Reads` per distinct set of specs and constraints (by value:
    index positions, the bucket mapper as :func:`~fi_compat.adapters.keys.closure_value`),
    found by identity when a call brings the same objects again (the tuning
    configs of one model share their specs; fi_compat's builder memo hands out
    one config per key).  Thread-safe.

    The identities are held (a spec tuple cannot be referenced weakly, and an
    id is only an identity while its object lives), at most ``identities`` of
    them: pass the cache size, as many configs as fi_compat's builder memo
    keeps alive anyway; more would keep configs it has let go.  The values
    are bounded at :data:`SPEC_SETS_KEPT`."""

    def __init__(self, identities: int = SPEC_SETS_KEPT) -> None:
        self._identities = max(1, identities)
        self._by_identity: dict[int, tuple[Any, Any, Reads]] = {}
        self._by_value: dict[Hashable, Reads] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        """Forget every identity and every interned set (the memo's ``cache_clear()``):
        a bucket mapper whose behaviour changed is read anew."""
        with self._lock:
            self._by_identity.clear()
            self._by_value.clear()

    def reads(self, dynamic: Any, constraints: Any) -> Reads:
        """Raises ``AttributeError`` / ``IndexError`` / ``TypeError`` for specs the
        search could not read either."""
        known = self._by_identity.get(id(dynamic))
        if known is not None and known[0] is dynamic and known[1] is constraints:
            return known[2]
        read = tuple((spec.input_idx[0], spec.dim_idx[0]) for spec in dynamic)
        written = tuple((i, d) for spec in dynamic for i, d in zip(spec.input_idx, spec.dim_idx)) + tuple(
            (c.input_idx, c.dim_idx) for c in constraints
        )
        value = (
            tuple((s.input_idx, s.dim_idx, closure_value(s.map_to_tuning_buckets)) for s in dynamic),
            tuple((c.input_idx, c.dim_idx) for c in constraints),
        )
        hash(value)
        with self._lock:
            # the identities turn over when configs are built per call (0.6.13 - 0.6.15 without
            # fi_compat's builder memo); the values only with the models served
            if len(self._by_identity) >= self._identities:
                self._by_identity.clear()
            if len(self._by_value) >= SPEC_SETS_KEPT:
                self._by_value.clear()
            reads = self._by_value.setdefault(value, Reads(read, written))
            self._by_identity[id(dynamic)] = (dynamic, constraints, reads)
        return reads


def specs_reader(layout: ArgumentLayout) -> Callable[[tuple[Any, ...]], tuple[Any, Any]]:
    """``values -> (dynamic specs, constraints)``: from the call's own parameters
    (``_find_nearest_profile_cached``) or its tuning config's (``_find_nearest_profile``)."""
    at = layout.index
    if "dynamic_tensor_specs" in at:
        dynamic, constraints = at["dynamic_tensor_specs"], at["constraint_specs"]
        return lambda values: (values[dynamic], values[constraints])
    config = at["tuning_config"]

    def of_config(values: tuple[Any, ...]) -> tuple[Any, Any]:
        return values[config].dynamic_tensor_specs, values[config].constraint_specs

    return of_config


def entry(
    layout: ArgumentLayout,
    target: Callable[..., Any],
    fallback: Callable[[tuple[Any, ...], dict[str, Any]], Any],
    cache_size: int,
) -> Callable[..., Any]:
    """The memo's proxy factory (:func:`fi_compat.memo.proxies.memoized_function`'s
    ``entry``) for either search: keys with :class:`Reads`, computes a miss
    with ``target`` (flashinfer's uncached function) on the masked shapes, and
    answers each call with :meth:`Answer.for_call`.  ``cache_size``: fi_compat's
    cache size, the spec identities it keeps (:class:`SpecIndex`)."""
    complete, count = layout.complete, len(layout.names)
    shapes_at = layout.index["shapes"]
    specs_of = specs_reader(layout)
    index = SpecIndex(identities=cache_size)

    def compute(values: tuple[Any, ...], reads: Reads, lengths: tuple[int, ...]) -> Answer:
        shapes = values[shapes_at]
        profile = target(*values[:shapes_at], reads.masked(shapes), *values[shapes_at + 1 :])
        return reads.answer(profile, lengths)

    def make(
        wrapped: Callable[..., Any],
        switch: Any,
        lookup: Callable[..., Any],
        fill: Callable[..., Any],
        _compute: Callable[..., Any],
    ) -> Callable[..., Any]:
        # The last call answered from tuples (immutable), per memo: the autotuner asks
        # once per runner, so a decode with two runners asks twice about one batch.
        last: list[Any] = [(None, None, None)]

        def proxy(*args: Any, **kwargs: Any) -> Any:
            if not switch.active:
                return wrapped(*args, **kwargs)
            values = args if not kwargs and len(args) == count else complete(args, kwargs)
            if values is None:
                return fallback(args, kwargs)
            shapes = values[shapes_at]
            try:
                reads = index.reads(*specs_of(values))
                last_reads, last_shapes, last_answer = last[0]
                # the slot answers only while the memo still holds its entry (counted as the hit it is):
                # an evicted or cleared entry is computed anew, as flashinfer's own memo would
                if last_reads is reads and last_shapes == shapes and lookup(last_answer[0]) is not MISSING:
                    return last_answer[1]
                key = reads.key(shapes)
                value = lookup(key)
            except (AttributeError, IndexError, TypeError):
                return fallback(args, kwargs)
            if value is MISSING:
                value = fill(key, compute, values, reads, key[1])
            if type(shapes) is tuple:
                answer = value.for_tuples(shapes)
                if answer is not None:
                    last[0] = (reads, shapes, (key, answer))  # one assignment: threads see one triple or another
                    return answer
            return value.for_call(shapes)

        def forget() -> None:
            last[0] = (None, None, None)
            index.clear()

        proxy.fi_compat_forget = forget  # type: ignore[attr-defined]  # cache_clear() calls it
        return proxy

    return make


__all__ = ["Answer", "Reads", "SPEC_SETS_KEPT", "SpecIndex", "entry", "specs_reader"]
