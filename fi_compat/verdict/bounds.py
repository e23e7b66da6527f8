"""The caches fi_compat bounds: one declarative row each.

A row (:class:`Bound`) is plain data: the flashinfer function (from
:mod:`fi_compat.model.specs`), the name of its key strategy
(:mod:`fi_compat.adapters.strategies`: how a call becomes a key, with the proof
that the key changes nothing flashinfer computes), what the memo does, and the
releases the matrix verified it on.  The next leak flashinfer ships is one more
row.  What fi_compat does with a row on a release is
:func:`fi_compat.verdict.judgement.judge`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..model import specs
from ..adapters.strategies import KeyStrategy, strategy


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


_K_TILE_PROOF = (
    "output depends on max_seq_len only through ceil(max_seq_len / 128), the K-tile count "
    "(mma_qk_tile_n = 128); key on 128 * ceil(max_seq_len / 128); "
    "tests/matrix/test_key_proofs.py compares outputs on random arguments"
)

_EXACT = "keyed on its arguments as they are: nothing normalised, only bounded"

_BUCKET_READS_PROOF = (
    "the search reads, of the shapes, their lengths and the dimension each dynamic spec names first, "
    "and of the specs their input_idx, dim_idx and map_to_tuning_buckets and each constraint's indices; "
    "every other dimension passes through unread: keyed on what it reads (not on the block-table width "
    "or the profile lengths inside the initializers), answered by flashinfer on the masked shapes and "
    "completed with the call's own dimensions; tests/matrix/test_bucket_match.py compares answers"
)

# Sizes (docs/design.md): the sizers and 0.6.18's nearest-profile memo keep the
# plain size, since a hit saves 0.6 / 1.4 us over the uncached call (CPU host)
# for ~290 / 400 B an entry once the batch cap's probes no longer reach them;
# the batch cap (a 13-step search per miss) holds a 128K context's K-tile classes twice.
BOUNDS: tuple[Bound, ...] = (
    Bound(
        "tuning-config",
        specs.TUNING_CONFIG,
        key="tuning-config",
        grows_with="profile_seq_len = min(max_seq_len, block-table capacity): one entry per distinct length",
        proof=(
            "profile_seq_len only fills the synthetic seq_lens used while autotuning: keyed on "
            "profile_ladder (top 4 bits, rounded down); sparse_top_k_width is read only when "
            "has_sparse_mla_top_k_lens; tests/matrix/test_key_proofs.py compares every field"
        ),
        verified=specs.verified_from("0.6.15.post1"),
        keep_identity=True,
    ),
    Bound(
        "split-kv",
        specs.CUTE_DSL_SPLIT_KV,
        key="split-count",
        grows_with="max_seq_len (0.6.16 on) and the batch size of every step of the cute-dsl batch-cap search",
        proof=(
            "output depends on max_seq_len only through the nonempty split count "
            "ceil(K / ceil(K / s)) of the K-tile count K = ceil(max_seq_len / 128); key on 128 times "
            "that count where the saturated split count s is at most 32 (fi_compat.adapters.split_counts), "
            "else on the saturated K-tile count; tests/matrix/test_key_proofs.py compares outputs on "
            "random arguments"
        ),
        verified=specs.verified_from("0.6.13"),
    ),
    Bound(
        "batch-cap",
        specs.CUTE_DSL_BATCH_CAP,
        key="batch-cap",
        grows_with=(
            "nothing itself (flashinfer keeps no cache on it), but its binary search puts about 13 probe "
            "batch sizes per K-tile class into the sizer's cache, and it runs on every decode that "
            "builds a tuning config with a cute-dsl runner"
        ),
        proof=(
            "the search reads max_seq_len only to pass it to the sizer, which reads it only as the K-tile "
            "count: keyed on 128 * ceil(max_seq_len / 128); tests/matrix/test_key_proofs.py compares "
            "outputs on random arguments"
        ),
        verified=specs.verified_from("0.6.16"),
        memoize_plain=True,
        scale=8,
        probes=True,
    ),
    Bound(
        "split-kv-modular",
        specs.CUTE_DSL_SPLIT_KV_BATCH_MLA,
        key="k-tile",
        grows_with="the batch size of every step of the cute-dsl batch-cap search",
        proof=_EXACT,
        verified=specs.verified_from("0.6.13"),
    ),
    Bound(
        "split-kv-hca",
        specs.CUTE_DSL_SPLIT_KV_BATCH_HCA,
        key="k-tile",
        grows_with="batch size and max_hca_len",
        proof=_EXACT,
        verified=specs.verified_from("0.6.18"),
    ),
    Bound(
        "split-kv-rubin-mtp",
        specs.CUTE_DSL_SPLIT_KV_RUBIN_MTP,
        key="k-tile",
        grows_with="max_seq_len and batch size",
        proof=_K_TILE_PROOF,
        verified=specs.verified_from("0.7.4"),
    ),
    Bound(
        "nearest-profile",
        specs.NEAREST_PROFILE,
        key="bucket-reads",
        grows_with="the call's tensor shapes (batch size, block-table width) times the configs",
        proof=_BUCKET_READS_PROOF,
        verified=specs.verified_from("0.6.13"),
        replace_bounded=True,
        scale=16,
    ),
    Bound(
        "nearest-profile-cached",
        specs.NEAREST_PROFILE_CACHED,
        key="bucket-reads",
        grows_with="the call's tensor shapes (batch size, block-table width) times the configs' specs",
        proof=_BUCKET_READS_PROOF,
        verified=specs.verified_from("0.6.18"),
        replace_bounded=True,
    ),
    Bound(
        "builder",
        specs.TUNING_CONFIG_BUILDER,
        key="builder",
        grows_with=(
            "nothing itself, but a fresh TuningConfig per call defeats the autotuner's caches "
            "(0.6.13-0.6.15: colliding nearest-profile keys, tens of ms per call) and costs "
            "~12 us per decode"
        ),
        proof=(
            "the builder reads shapes and scalars only, never tensor data; see keys.builder_key; "
            "tests/matrix/test_key_proofs.py compares configs with flashinfer's"
        ),
        verified=specs.verified_from("0.6.13"),
        memoize_plain=True,
        keep_identity=True,
    ),
)


def by_name(name: str) -> Bound:
    for bound in BOUNDS:
        if bound.name == name:
            return bound
    raise KeyError(f"no bound named {name!r}; known: {', '.join(b.name for b in BOUNDS)}")


__all__ = ["BOUNDS", "Bound", "by_name"]
