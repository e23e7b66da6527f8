"""TensorRT-LLM's builder-memo workaround, reproduced for the tests.

TensorRT-LLM cannot be installed here.  This module behaves as its
``_install_flashinfer_mla_decode_tuning_config_cache`` does, written for these
tests from the facts read in its source
(``tensorrt_llm/_torch/attention/backends/fmha/flashinfer_trtllm_gen.py`` at
commits 05412d19b161a41b5867a5b0d6320cc6b9ed60c6 and
9eabd2dfcf9bdf76301406e5f9461b6c1abd1951, where the function is the same) and
measured by running that file against the real flashinfer wheels (see
docs/integration/tensorrt_llm.md).  None of its code is copied here.

The facts it reproduces:

* **When it installs.**  Once, at import of TensorRT-LLM's attention backend
  module, if flashinfer imported (``IS_FLASHINFER_AVAILABLE``): so in a
  TensorRT-LLM process it runs before any user code that follows that import.
  :func:`import_tensorrt_llm` is that import (``trtllm_fake_backend``, whose
  body runs :func:`install_workaround`); this module itself has no side effects.
* **The probe.**  Two ``flashinfer.autotuner.autotuner.DynamicTensorSpec``
  objects built alike, with ``tensor_initializers``, must hash equal and compare
  unequal (flashinfer's hash/eq mismatch); the builder must not carry the
  marker already; its parameters must be exactly the nine names below, in
  order, and bind by keyword.  Anything else returns silently.
  ``ImportError`` (0.6.13/0.6.14: no ``flashinfer.autotuner.autotuner``),
  ``AttributeError``, ``TypeError`` (0.6.18 on: no ``tensor_initializers``)
  and ``ValueError`` are caught and logged at DEBUG.
* **The memo.**  A plain dict; the key is the 10-tuple
  ``(kv_cache.shape[0], kv_cache.shape[-2], block_tables.shape[-1],
  workspace_buffer.numel() * workspace_buffer.element_size(),
  tuple(runner_names), q_len, num_heads, kv_lora_rank, max_seq_len, device)``,
  computed on every call (``workspace_buffer=None`` raises ``AttributeError``
  to the caller); on a miss, with 256 entries or more, the whole dict is
  cleared, then the original is called with all nine arguments as keywords.
* **The function.**  Nine positional-or-keyword parameters, no defaults; no
  ``functools.wraps`` (no ``__wrapped__``); named ``_cached_build``; marked
  ``_trtllm_mla_tuning_config_cache = True``; it replaces only the attribute
  of ``flashinfer.mla._core``.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import sys
from types import FunctionType
from typing import Any, Iterator, Optional

from packaging.version import Version

# What the real workaround did per release, measured with TensorRT-LLM's file
# (docs/integration/tensorrt_llm.md): it installs on these two; below 0.6.15 it
# skips (no flashinfer.autotuner.autotuner); 0.6.16/0.6.17 return silently (the
# builder gained parameters); from 0.6.18 it skips (DynamicTensorSpec lost
# tensor_initializers).
INSTALLED_ON = (Version("0.6.15"), Version("0.6.15.post1"))
AUTOTUNER_PACKAGE_FROM = Version("0.6.15")
INITIALIZERS_UNTIL = Version("0.6.18")

MARKER = "_trtllm_mla_tuning_config_cache"
MAX_ENTRIES = 256
BUILDER_PARAMETERS = ("kv_cache", "block_tables", "workspace_buffer", "runner_names", "q_len", "num_heads",
                      "kv_lora_rank", "max_seq_len", "device")
INSTALLED_MESSAGE = "Memoized flashinfer _build_mla_decode_tuning_config (autotuner cache collision-chain workaround)."
SKIPPED_MESSAGE = "Skipping flashinfer MLA decode tuning-config cache workaround."

# TensorRT-LLM logs through its own logger; tests read these records with caplog.
logger = logging.getLogger("tensorrt_llm_fake")


def _hash_equal_eq_unequal(spec_class: Any) -> bool:
    """Build two alike specs with initializers; True when flashinfer's hash and eq disagree."""

    def bucket(value: int) -> int:
        return value

    def build() -> Any:
        return spec_class(input_idx=(0,), dim_idx=(0,), gen_tuning_buckets=(1,), map_to_tuning_buckets=bucket,
                          tensor_initializers=[lambda shapes, dtype, device: None])

    first, second = build(), build()
    return hash(first) == hash(second) and first != second


def _memoize(core: Any, original: Any) -> None:
    entries: dict = {}

    def _cached_build(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                      max_seq_len, device):
        key = (kv_cache.shape[0], kv_cache.shape[-2], block_tables.shape[-1],
               workspace_buffer.numel() * workspace_buffer.element_size(), tuple(runner_names), q_len, num_heads,
               kv_lora_rank, max_seq_len, device)
        config = entries.get(key)
        if config is None:
            if len(entries) >= MAX_ENTRIES:
                entries.clear()
            config = original(kv_cache=kv_cache, block_tables=block_tables, workspace_buffer=workspace_buffer,
                              runner_names=runner_names, q_len=q_len, num_heads=num_heads,
                              kv_lora_rank=kv_lora_rank, max_seq_len=max_seq_len, device=device)
            entries[key] = config
        return config

    setattr(_cached_build, MARKER, True)
    core._build_mla_decode_tuning_config = _cached_build


def install_workaround() -> None:
    """What TensorRT-LLM runs once, at import; never raises for the four caught types."""
    try:
        from flashinfer.autotuner.autotuner import DynamicTensorSpec
        from flashinfer.mla import _core

        if not _hash_equal_eq_unequal(DynamicTensorSpec):
            return
        original = _core._build_mla_decode_tuning_config
        if getattr(original, MARKER, False):
            return
        signature = inspect.signature(original)
        if tuple(signature.parameters) != BUILDER_PARAMETERS:
            return
        try:
            signature.bind(**dict.fromkeys(BUILDER_PARAMETERS))
        except TypeError:
            return
        _memoize(_core, original)
        logger.debug(INSTALLED_MESSAGE)
    except (ImportError, AttributeError, TypeError, ValueError):
        logger.debug(SKIPPED_MESSAGE)


def memo_entries(function: Any) -> Optional[dict]:
    """The dict inside an installed workaround (read from its closure, as one
    would inspect TensorRT-LLM's), or ``None`` for anything else."""
    # type(), not inspect.isfunction: a wrapt proxy passes isinstance checks for what it wraps
    if type(function) is not FunctionType or getattr(function, MARKER, False) is not True:
        return None
    return inspect.getclosurevars(function).nonlocals.get("entries")


def workaround_of(core: Any) -> Optional[Any]:
    """The installed workaround wherever it sits: the builder attribute, or inside
    fi_compat's proxy there."""
    current = core._build_mla_decode_tuning_config
    for candidate in (current, getattr(current, "_fi_compat_original", None)):
        if memo_entries(candidate) is not None:
            return candidate
    return None


@contextlib.contextmanager
def builder_restored() -> Iterator[Any]:
    """``flashinfer.mla._core`` (import it under the CPU shim first); afterwards
    fi_compat is reset and the original builder put back, so a workaround (or
    one wrapping fi_compat's proxy) never leaks into the next test."""
    import flashinfer.mla._core as core
    from fi_compat.installing import installer

    original = core._build_mla_decode_tuning_config
    try:
        yield core
    finally:
        installer.reset()
        core._build_mla_decode_tuning_config = original


BACKEND_MODULE = "helpers.trtllm_fake_backend"


def import_tensorrt_llm() -> Any:
    """Import TensorRT-LLM's attention backend module afresh, as a TensorRT-LLM
    process does: its module-level install runs (again).  Import flashinfer
    first, as TensorRT-LLM does (under the CPU shim here)."""
    sys.modules.pop(BACKEND_MODULE, None)
    return importlib.import_module(BACKEND_MODULE)
