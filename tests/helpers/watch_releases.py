"""Releases for the runtime watch's tests: the real flashinfer with ONE edit each.

A test-support module (no tests here).  Each :class:`drift.Edit` below edits
the real ``flashinfer/mla/_core.py`` (and, for the redesign's move, adds
``flashinfer/mla/_batch_mla/_tuning.py``); :func:`drift.build_site` lays it over
the real package.  Hand-written memos sit at the top of the decode function
(``trtllm_batch_decode_with_kv_cache_mla``), so every engine call reaches them;
each is the shape a release could write by hand:

``instance-dict``   a dict on the ``AutoTuner`` instance keyed on (batch, max_seq_len)
``module-set``      a module-level set of seen (batch, max_seq_len)
``closure-dict``    a dict inside a factory's closure
``late-cache``      a ``functools.cache`` only lengths above 131,072 reach
``thread-local``    a dict on a ``threading.local``
``call-list``       a list appended per call
``moved``           the tuning config and its builder moved to ``flashinfer/mla/_batch_mla/_tuning.py``
                    (where flashinfer's redesign keeps them), imported back
``moved-renamed``   moved, and both renamed: no fi_compat row names them
``renamed-bounded`` moved, renamed and bounded with ``lru_cache(maxsize=256)`` (a good upgrade)
``positional-only`` the tuning config's parameters positional-only (a good upgrade: its caller passes them so)
``hand-memo``       the tuning config's ``functools.cache`` rewritten by hand as a module-level dict

:data:`PROBES` says, per edit, how the test reads the growing memory itself
(entry counts of flashinfer's own container, never fi_compat's statistics).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fi_compat.model.specs import DECODE, TUNING_CONFIG, TUNING_CONFIG_BUILDER

from helpers.drift import CORE_FILE, Edit
from helpers.drift_source import SourceEditor, move_functions, prologue, rename_function, set_decorator

D, B, C = DECODE.name, TUNING_CONFIG_BUILDER.name, TUNING_CONFIG.name
LATE_FROM = 131_072
MOVED_FILE = "flashinfer/mla/_batch_mla/_tuning.py"
MOVED_MODULE = "flashinfer.mla._batch_mla._tuning"
RENAMED_CONFIG = "_batch_mla_tuning_config"
RENAMED_BUILDER = "_build_batch_mla_tuning_config"


def _decode_edit(module_code: str, *lines: str) -> Callable[[str], dict[str, str]]:
    """Module-level ``module_code`` appended to the core module, ``lines`` at the top of the decode function."""

    def change(text: str) -> dict[str, str]:
        source = SourceEditor(text)
        prologue(source, D, *lines)
        return {CORE_FILE: source.result() + "\n\n" + module_code.strip() + "\n"}

    return change


def _has_decode(text: str) -> bool:
    return SourceEditor(text).function(D) is not None


def _has_tuning(text: str) -> bool:
    source = SourceEditor(text)
    node = source.function(C)
    return node is not None and source.function(B) is not None and "_batch_mla" in text


def _moved(rename: bool, decorator: str | None) -> Callable[[str], dict[str, str]]:
    def change(text: str) -> dict[str, str]:
        names = [C, B]
        if decorator is not None:
            source = SourceEditor(text)
            set_decorator(source, C, "functools.cache", decorator)
            text = source.result()
        if rename:
            for old, new in ((C, RENAMED_CONFIG), (B, RENAMED_BUILDER)):
                source = SourceEditor(text)
                rename_function(source, old, new)
                text = source.result()
            names = [RENAMED_CONFIG, RENAMED_BUILDER]
        source = SourceEditor(text)
        moved = move_functions(source, names, "_batch_mla._tuning")
        # the moved module reads the core module's names: it sits one package deeper than move_functions assumes
        moved = moved.replace("__name__.rpartition('.')[0] + '._core'", "'flashinfer.mla._core'")
        core = source.result().replace("from . import _batch_mla._tuning as _drift_moved",
                                       "from ._batch_mla import _tuning as _drift_moved")
        return {CORE_FILE: core, MOVED_FILE: moved}

    return change


def _positional_only_config(text: str) -> dict[str, str]:
    """A ``/`` after the tuning config's last positional parameter."""
    source = SourceEditor(text)
    node = source.function(C)
    last = node.args.defaults[-1] if node.args.defaults else node.args.args[-1]
    end = source.at(last.end_lineno, last.end_col_offset)
    source.replace(end, end, ", /")
    return {CORE_FILE: source.result()}


def _hand_memo(text: str) -> dict[str, str]:
    """The tuning config's ``functools.cache`` replaced by a dict memo written by hand,
    under the same name (the row finds a function that keeps no cache)."""
    source = SourceEditor(text)
    set_decorator(source, C, "functools.cache", None)
    uncached = source.result().replace(f"def {C}(", f"def {C}_uncached(", 1)  # its callers keep the name
    memo = (
        f"_TUNING_CONFIGS = {{}}\n\n\n"
        f"def {C}(*args, **kwargs):\n"
        f"    key = (args, tuple(sorted(kwargs.items())))\n"
        f"    if key not in _TUNING_CONFIGS:\n"
        f"        _TUNING_CONFIGS[key] = {C}_uncached(*args, **kwargs)\n"
        f"    return _TUNING_CONFIGS[key]\n"
    )
    return {CORE_FILE: uncached + "\n\n" + memo}


EDITS: dict[str, Edit] = {
    "instance-dict": Edit(
        "instance-dict", "a dict on the AutoTuner instance keyed on (batch, max_seq_len)", DECODE.qualname,
        _decode_edit("", "AutoTuner.get().__dict__.setdefault('_seen_batch_lengths', {})"
                         "[(query.shape[0], max_seq_len)] = block_tables.shape[-1]"),
        lambda text: _has_decode(text) and "AutoTuner" in text),
    "module-set": Edit(
        "module-set", "a module-level set of seen (batch, max_seq_len)", DECODE.qualname,
        _decode_edit("_SEEN_BATCH_LENGTHS = set()", "_SEEN_BATCH_LENGTHS.add((query.shape[0], max_seq_len))"),
        _has_decode),
    "closure-dict": Edit(
        "closure-dict", "a dict inside a factory's closure", DECODE.qualname,
        _decode_edit(
            "def _length_memo():\n"
            "    memo = {}\n\n"
            "    def remember(batch, max_seq_len):\n"
            "        key = (batch, max_seq_len)\n"
            "        if key not in memo:\n"
            "            memo[key] = -(-max_seq_len // 128)\n"
            "        return memo[key]\n\n"
            "    return remember\n\n\n"
            "_remember_length = _length_memo()\n",
            "_remember_length(query.shape[0], max_seq_len)"),
        _has_decode),
    "late-cache": Edit(
        "late-cache", f"a functools.cache only lengths above {LATE_FROM:,} reach", DECODE.qualname,
        _decode_edit("@functools.cache\ndef _long_context_splits(max_seq_len):\n    return -(-max_seq_len // 4096)\n",
                     f"if max_seq_len > {LATE_FROM}:", "    _long_context_splits(max_seq_len)"),
        lambda text: _has_decode(text) and "import functools" in text),
    "thread-local": Edit(
        "thread-local", "a dict on a threading.local", DECODE.qualname,
        _decode_edit("import threading as _threading\n\n_DECODE_STATE = _threading.local()\n",
                     "_plans = getattr(_DECODE_STATE, 'plans', None)",
                     "if _plans is None:", "    _plans = _DECODE_STATE.plans = {}",
                     "_plans[(query.shape[0], max_seq_len)] = max_seq_len"),
        _has_decode),
    "call-list": Edit(
        "call-list", "a list appended per call", DECODE.qualname,
        _decode_edit("_DECODE_LOG = []", "_DECODE_LOG.append((query.shape[0], max_seq_len))"), _has_decode),
    "moved": Edit(
        "moved", "tuning config and builder moved to flashinfer/mla/_batch_mla/_tuning.py", TUNING_CONFIG.qualname,
        _moved(False, None), _has_tuning),
    "moved-renamed": Edit(
        "moved-renamed", "moved there and renamed", TUNING_CONFIG.qualname, _moved(True, None), _has_tuning),
    "renamed-bounded": Edit(
        "renamed-bounded", "moved, renamed and bounded with lru_cache(maxsize=256)", TUNING_CONFIG.qualname,
        _moved(True, "functools.lru_cache(maxsize=256)"), _has_tuning),
    "positional-only": Edit(
        "positional-only", "the tuning config's parameters positional-only (its one caller passes them so)",
        TUNING_CONFIG.qualname, _positional_only_config, lambda text: SourceEditor(text).function(C) is not None),
    "hand-memo": Edit(
        "hand-memo", "the tuning config's functools.cache rewritten by hand as a module-level dict",
        TUNING_CONFIG.qualname, _hand_memo, lambda text: SourceEditor(text).function(C) is not None),
}


@dataclass(frozen=True)
class Expectation:
    """What the watch must say about an edit: ``action`` for the container
    ``container`` names (``None``: nothing may be reported), read by ``probe``
    in the child (a Python expression over ``core``, ``moved`` and ``tuner``);
    ``missing``: the functions install() must name as missing (a WARNING each)."""

    container: str | None
    action: str | None
    probe: str
    late: bool = False
    missing: tuple[str, ...] = ()


def _functools_size(expression: str) -> str:
    # the flashinfer cache itself, also when fi_compat's memo stands in front of it
    return f"getattr({expression}, '_fi_compat_original', {expression}).cache_info().currsize"


EXPECTED: dict[str, Expectation] = {
    "instance-dict": Expectation("_seen_batch_lengths", "warned", "len(tuner.__dict__.get('_seen_batch_lengths', {}))"),
    "module-set": Expectation("_SEEN_BATCH_LENGTHS", "warned", "len(core._SEEN_BATCH_LENGTHS)"),
    "closure-dict": Expectation("<closure memo>", "warned", "len(core._remember_length.__closure__[0].cell_contents)"),
    "late-cache": Expectation("_long_context_splits", "bounded", _functools_size("core._long_context_splits"),
                              late=True),
    "thread-local": Expectation("_DECODE_STATE.plans", "warned", "len(getattr(core._DECODE_STATE, 'plans', {}))"),
    "call-list": Expectation("_DECODE_LOG", "warned", "len(core._DECODE_LOG)"),
    "moved": Expectation(None, None, _functools_size(f"moved.{C}")),
    "moved-renamed": Expectation(RENAMED_CONFIG, "bounded", _functools_size(f"moved.{RENAMED_CONFIG}"),
                                 missing=(C, B)),
    # a good upgrade fi_compat does not know by name: warned as unknown, measured flat, nothing bounded twice
    "renamed-bounded": Expectation(None, None, _functools_size(f"moved.{RENAMED_CONFIG}"), missing=(C, B)),
    # fi_compat's row bounds it (flashinfer's callers pass them positionally): nothing grows, nothing said
    "positional-only": Expectation(None, None, _functools_size(f"core.{C}")),
    # its signature no longer matches the row's (``*args, **kwargs``): named at install; fi_compat's memo of
    # the builder, which calls it, already bounds what it keeps (measured flat), so the watch says nothing
    "hand-memo": Expectation(None, None, "len(core._TUNING_CONFIGS)", missing=(C,)),
}


#: The real release under another label only (a nightly's ``.devN``, a source build's
#: version): nothing edited, so nothing grows; the watch runs because the label is not verified.
RELABELLED = Edit("relabelled", "the real release under an unverified label, nothing edited", TUNING_CONFIG.qualname,
                  lambda text: {}, lambda text: True)
