"""The caches fi_compat bounds: one declarative row each, and the verdict on each row.

A row (:class:`Bound`) is plain data: the flashinfer function (from
:mod:`fi_compat.specs`), the name of its key strategy
(:mod:`fi_compat.adapters.strategies`: how a call becomes a key, with the proof
that the key changes nothing flashinfer computes), what the memo does, and the
releases the matrix verified it on.  The next leak flashinfer ships is one more
row.

:func:`judge` decides, per row and from what :mod:`fi_compat.lookup` found, what
fi_compat does -- the same function for the runtime, ``fi-compat doctor`` and
``fi-compat guard``, so they cannot disagree:

====================  ==========================================================
verdict               meaning, and what fi_compat does
====================  ==========================================================
``bound``             flashinfer's cache is unbounded (or, for the builder, there
                      is none and fi_compat memoizes it): fi_compat bounds it
``bounded-upstream``  flashinfer bounds it itself (``lru_cache(maxsize=N)``):
                      fi_compat stands aside
``no-cache``          flashinfer keeps no cache there: nothing to bound
``not-in-release``    the release predates the function, or the row (older than
                      :attr:`Bound.since`): nothing to bound here, no WARNING
``missing``           the release should have it and nothing binds it (moved or
                      removed): WARNING, or an error in strict mode
``mismatch``          its parameters changed, so the key may be incomplete:
                      fi_compat leaves it alone, WARNING or strict error
====================  ==========================================================

A row is *verified* when the release matrix ran that release
(:data:`fi_compat.release_list.MATRIX_RELEASES`), the release lies in the row's
verified range, and the function sits where the spec says; otherwise a
``bound`` verdict is applied with an UnverifiedReleaseWarning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from . import specs
from .adapters.strategies import KeyStrategy, strategy
from .config import DEFAULT_CACHE_SIZE
from .lookup import BOUNDED, NO_MEMO, UNBOUNDED, Found
from .release_list import MATRIX_RELEASES
from .signatures import Mismatch, compare

BOUND = "bound"
BOUNDED_UPSTREAM = "bounded-upstream"
NO_CACHE = "no-cache"
NOT_IN_RELEASE = "not-in-release"
MISSING = "missing"
MISMATCH = "mismatch"

#: Verdicts that leave a leak fi_compat was supposed to close: a WARNING, or an error when strict.
PROBLEMS = (MISSING, MISMATCH)

@dataclass(frozen=True)
class Bound:
    """One cache fi_compat bounds.

    ``key``: the name of its key strategy
    (:data:`fi_compat.adapters.strategies.STRATEGIES`).  ``memoize_plain``: memoize the function
    even where flashinfer keeps no cache on it.  ``replace_bounded``: bound it
    even where flashinfer bounds it (at a size far above fi_compat's, on a key
    that grows per request).  ``scale``: the row's LRU holds ``scale *
    cache_size`` entries (rows of tiny entries, or of keys that a serving
    engine legitimately has thousands of).  ``keep_identity``: an evicted value
    that someone still holds is handed out again for its key, so flashinfer's
    identity-keyed caches (the autotuner's) see the same object.  ``probes``: a miss of this row calls other
    memoized functions with arguments nobody asks for again (a search); while
    it computes, the other memos answer from what they hold and keep nothing new.
    """

    name: str
    spec: specs.FunctionSpec
    key: str
    grows_with: str
    proof: str
    verified: SpecifierSet
    memoize_plain: bool = False
    replace_bounded: bool = False
    scale: int = 1
    keep_identity: bool = False
    probes: bool = False

    def __post_init__(self) -> None:
        strategy(self.key)  # an unknown name fails when the table is defined, naming the known ones

    @property
    def strategy(self) -> KeyStrategy:
        return strategy(self.key)

    @property
    def module(self) -> str:
        return self.spec.module

    @property
    def since(self) -> Optional[Version]:
        """The first release the row covers: the lower end of its verified range.

        Older releases predate the row (``not-in-release``, no WARNING): before
        0.6.13 flashinfer's MLA decode runs no autotuner and keys no cache on
        max_seq_len (read from the 0.6.4 - 0.6.12 wheels: no tuning-config
        builder, sizers keyed by batch size and SM count only), so there is no
        leak to close and no verified key to close it with.  A release above the
        range is different: it inherits the leak and is bounded, unverified."""
        lowest = [Version(s.version) for s in self.verified if s.operator in (">=", "==")]
        return min(lowest) if lowest else None


_K_TILE_PROOF = ("output depends on max_seq_len only through ceil(max_seq_len / 128), the K-tile count "
                 "(mma_qk_tile_n = 128); key on 128 * ceil(max_seq_len / 128); "
                 "tests/matrix/test_key_proofs.py compares outputs on random arguments")

_EXACT = "keyed on its arguments as they are: nothing normalised, only bounded"

# Sizes (docs/design.md): the sizers and 0.6.18's nearest-profile memo keep the
# plain size, since a hit saves 0.6 / 1.4 us over the uncached call (CPU host)
# for ~290 / 400 B an entry once the batch cap's probes no longer reach them;
# the batch cap (a 13-step search per miss) holds a 128K context's K-tile classes twice.
BOUNDS: tuple[Bound, ...] = (
    Bound(
        "tuning-config", specs.TUNING_CONFIG, key="tuning-config",
        grows_with="profile_seq_len = min(max_seq_len, block-table capacity): one entry per distinct length",
        proof=("profile_seq_len only fills the synthetic seq_lens used while autotuning: keyed on "
               "profile_ladder (top 4 bits, rounded down); sparse_top_k_width is read only when "
               "has_sparse_mla_top_k_lens; tests/matrix/test_key_proofs.py compares every field"),
        verified=specs.verified_from("0.6.15.post1"), keep_identity=True,
    ),
    Bound(
        "split-kv", specs.CUTE_DSL_SPLIT_KV, key="saturated-k-tile",
        grows_with="max_seq_len (0.6.16 on) and the batch size of every step of the cute-dsl batch-cap search",
        proof=_K_TILE_PROOF, verified=specs.verified_from("0.6.13"),
    ),
    Bound(
        "batch-cap", specs.CUTE_DSL_BATCH_CAP, key="batch-cap",
        grows_with=("nothing itself (flashinfer keeps no cache on it), but its binary search puts about 13 probe "
                    "batch sizes per K-tile class into the sizer's cache, and it runs on every decode that "
                    "builds a tuning config with a cute-dsl runner"),
        proof=("the search reads max_seq_len only to pass it to the sizer, which reads it only as the K-tile "
               "count: keyed on 128 * ceil(max_seq_len / 128); tests/matrix/test_key_proofs.py compares "
               "outputs on random arguments"),
        verified=specs.verified_from("0.6.16"), memoize_plain=True, scale=8, probes=True,
    ),
    Bound(
        "split-kv-modular", specs.CUTE_DSL_SPLIT_KV_BATCH_MLA, key="k-tile",
        grows_with="the batch size of every step of the cute-dsl batch-cap search",
        proof=_EXACT, verified=specs.verified_from("0.6.13"),
    ),
    Bound(
        "split-kv-hca", specs.CUTE_DSL_SPLIT_KV_BATCH_HCA, key="k-tile",
        grows_with="batch size and max_hca_len",
        proof=_EXACT, verified=specs.verified_from("0.6.18"),
    ),
    Bound(
        "split-kv-rubin-mtp", specs.CUTE_DSL_SPLIT_KV_RUBIN_MTP, key="k-tile",
        grows_with="max_seq_len and batch size", proof=_K_TILE_PROOF, verified=specs.verified_from("0.7.4"),
    ),
    Bound(
        "nearest-profile", specs.NEAREST_PROFILE, key="nearest-profile",
        grows_with="the call's tensor shapes (batch size, block-table width) times the configs",
        proof=("the search reads only the shapes and, of the config, each spec's input_idx, dim_idx and "
               "map_to_tuning_buckets (memoized by flashinfer, shared by a model's configs) and each "
               "constraint's indices: keyed on those, as flashinfer itself keys from 0.6.18, so the "
               "profile lengths inside the initializers do not multiply the entries per batch shape"),
        verified=specs.verified_from("0.6.13"), replace_bounded=True, scale=16,
    ),
    Bound(
        "nearest-profile-cached", specs.NEAREST_PROFILE_CACHED, key="exact",
        grows_with="the call's tensor shapes (batch size, block-table width) times the configs' specs",
        proof=_EXACT, verified=specs.verified_from("0.6.18"), replace_bounded=True,
    ),
    Bound(
        "builder", specs.TUNING_CONFIG_BUILDER, key="builder",
        grows_with=("nothing itself, but a fresh TuningConfig per call defeats the autotuner's caches "
                    "(0.6.13-0.6.15: colliding nearest-profile keys, tens of ms per call) and costs "
                    "~12 us per decode"),
        proof=("the builder reads shapes and scalars only, never tensor data; see keys.builder_key; "
               "tests/matrix/test_key_proofs.py compares configs with flashinfer's"),
        verified=specs.verified_from("0.6.13"), memoize_plain=True, keep_identity=True,
    ),
)


@dataclass(frozen=True)
class Verdict:
    """What fi_compat does with one row on one release, and why."""

    bound: Bound
    kind: str
    reason: str
    verified: bool = False
    found: Optional[Found] = None
    mismatch: Optional[Mismatch] = None

    @property
    def problem(self) -> bool:
        return self.kind in PROBLEMS

    def as_dict(self) -> dict[str, Any]:
        return {
            "cache": self.bound.spec.qualname, "name": self.bound.name, "verdict": self.kind,
            "verified": self.verified, "reason": self.reason,
            "where": None if self.found is None else self.found.where,
        }


_MATRIX = frozenset(Version(r) for r in MATRIX_RELEASES)


def _ran_in_matrix(release: Optional[Version]) -> bool:
    """Verified means "the release matrix ran it": a release inside a row's
    range that the matrix never ran (0.7.3, published only on flashinfer's own
    index) is unverified.  A local label (``+cu130``) is the same release."""
    return release is not None and Version(release.public) in _MATRIX


HUGE = 16
"""A flashinfer bound over HUGE times fi_compat's own (``cache_size * scale``) is effectively unbounded."""


def judge(bound: Bound, found: Optional[Found], release: Optional[Version], cache_size: int = DEFAULT_CACHE_SIZE) -> Verdict:
    """The verdict on ``bound`` given what a lookup found (``None``: nothing binds it);
    ``cache_size``: the setting in force (``maxsize`` is weighed against it).

    Pure: reads ``found`` and the release, runs nothing of flashinfer's."""
    qualname = bound.spec.qualname
    since = bound.since
    if release is not None and since is not None and Version(release.public) < since:
        if not bound.spec.present_in(release):
            return Verdict(bound, NOT_IN_RELEASE, f"{qualname} arrived in {bound.spec.added_in}")
        return Verdict(bound, NOT_IN_RELEASE,
                       f"flashinfer {release} predates this row: fi_compat bounds {qualname} from {since} on "
                       "(before it keys no cache on max_seq_len); nothing to bound here", found=found)
    if found is not None and found.moved and not bound.spec.present_in(release):
        found = None  # a namesake elsewhere in a release that predates the function
    if found is None:
        if not bound.spec.present_in(release):
            return Verdict(bound, NOT_IN_RELEASE, f"{qualname} arrived in {bound.spec.added_in}")
        return Verdict(bound, MISSING, f"{qualname} is missing (moved or removed)",
                       mismatch=compare(bound.spec, None, release))
    mismatch = compare(bound.spec, found.function, release)
    if mismatch is not None:
        return Verdict(bound, MISMATCH, mismatch.describe(), found=found, mismatch=mismatch)
    where = f" (found in {found.defined_in}, moved from {bound.spec.module})" if found.moved else ""
    verified = _ran_in_matrix(release) and bound.verified.contains(release, prereleases=False) and not found.moved
    if found.memo == BOUNDED and bound.replace_bounded:
        return Verdict(bound, BOUND, f"{qualname} is bounded by flashinfer at {found.maxsize} entries on a key "
                       f"that grows per request; fi_compat holds it to its own bound{where}", verified, found)
    if found.memo == BOUNDED and found.maxsize is not None and found.maxsize > HUGE * cache_size * bound.scale:
        return Verdict(bound, BOUND, f"{qualname} is bounded by flashinfer at {found.maxsize} entries, over {HUGE} "
                       f"times fi_compat's {cache_size * bound.scale}: effectively unbounded; fi_compat bounds it"
                       f"{where}", verified, found)
    if found.memo == BOUNDED:
        return Verdict(bound, BOUNDED_UPSTREAM,
                       f"{qualname} is bounded by flashinfer itself (maxsize {found.maxsize}){where}",
                       verified, found)
    if found.memo == UNBOUNDED:
        return Verdict(bound, BOUND, f"{qualname} has an unbounded functools cache{where}", verified, found)
    assert found.memo == NO_MEMO
    if bound.memoize_plain:
        also = f"; it was replaced by {found.foreign}" if found.foreign else ""
        return Verdict(bound, BOUND, f"{qualname} builds a fresh result per call{also}{where}", verified, found)
    return Verdict(bound, NO_CACHE, f"{qualname} keeps no cache{where}", verified, found)


VERIFIED = "verified"
UNVERIFIED = "unverified"
PARTIAL = "partial"
UNSUPPORTED = "unsupported"
PREDATES = "predates"


@dataclass(frozen=True)
class ReleaseVerdict:
    """Every row's verdict on one release, the call API's signature check, and the outcome.

    ``outcome``: ``predates`` (the release predates every row: nothing to
    bound, nothing to verify), ``verified`` (nothing to fix, every bound verified here),
    ``unverified`` (everything fits, but some bound runs outside the releases
    the matrix verified), ``partial`` (some rows cannot be bounded, others
    can) or ``unsupported`` (nothing can be bounded)."""

    release: Optional[Version]
    rows: tuple[Verdict, ...]
    call_api: Optional[Mismatch]

    @property
    def problems(self) -> list[Verdict]:
        return [v for v in self.rows if v.problem]

    @property
    def outcome(self) -> str:
        if self.problems:
            return PARTIAL if any(v.kind == BOUND for v in self.rows) else UNSUPPORTED
        if self.rows and all(v.kind == NOT_IN_RELEASE for v in self.rows):
            return PREDATES
        return VERIFIED if all(v.verified for v in self.rows if v.kind == BOUND) else UNVERIFIED

    def reason(self) -> str:
        parts = [v.reason for v in self.problems]
        unverified = [v.bound.spec.qualname for v in self.rows if v.kind == BOUND and not v.verified]
        if unverified:
            parts.append(f"outside the verified releases: {', '.join(unverified)}")
        if self.call_api is not None:
            parts.append(f"call API: {self.call_api.describe()}")
        if not parts and self.outcome == PREDATES:
            oldest = min((v.bound.since for v in self.rows if v.bound.since is not None), default=None)
            return (f"flashinfer {self.release} predates every cache fi_compat bounds (the first arrives in "
                    f"{oldest}): nothing to bound here")
        return "; ".join(parts) or f"flashinfer {self.release}: every bound fits and is verified"


def judge_release(lookup: Callable[[specs.FunctionSpec], Optional[Found]], release: Optional[Version],
                  cache_size: int = DEFAULT_CACHE_SIZE) -> ReleaseVerdict:
    """Every row of :data:`BOUNDS` and the decode signature, through one lookup
    (live, a package directory or a wheel: the runtime, doctor and the guard)."""
    rows = tuple(judge(bound, lookup(bound.spec), release, cache_size) for bound in BOUNDS)
    decode = lookup(specs.DECODE)
    return ReleaseVerdict(release, rows, compare(specs.DECODE, None if decode is None else decode.function, release))


def by_name(name: str) -> Bound:
    for bound in BOUNDS:
        if bound.name == name:
            return bound
    raise KeyError(f"no bound named {name!r}; known: {', '.join(b.name for b in BOUNDS)}")


__all__ = [
    "BOUND", "BOUNDED_UPSTREAM", "BOUNDS", "Bound", "MISMATCH", "MISSING", "NOT_IN_RELEASE", "NO_CACHE", "PARTIAL",
    "PREDATES", "PROBLEMS", "ReleaseVerdict", "UNSUPPORTED", "UNVERIFIED", "VERIFIED", "Verdict",
    "by_name", "judge", "judge_release",
]
