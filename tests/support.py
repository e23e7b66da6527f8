"""Helpers shared by the tests (not a fixture module).

Shapes and each engine's call come from :mod:`fi_compat.testing.workload`;
the matrix's own helpers are fixtures in tests/matrix/conftest.py and
tests/matrix/decode_driver.py.  ``decode_inputs``, ``trtllm_call`` and
``launch_signature`` remain for tests/matrix/test_call_api.py only (it passes
extra keywords through TensorRT-LLM's call): move it to the workload and
delete them.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from fi_compat.release_detection import detect_release


def installed_release() -> Version:
    version = detect_release().version
    assert version is not None, "these tests need flashinfer-python installed"
    return version


def decode_inputs(torch: Any, batch: int = 4, page_size: int = 32, width: int = 4096, num_pages: int = 256,
                  heads: int = 128, separate_kv_idx: bool = True) -> dict[str, Any]:
    """Tensors for a DeepSeek-style MLA decode (kv_lora_rank 512, rope 64) on CPU."""
    rank, rope = 512, 64
    tables = (batch, 2, width) if separate_kv_idx else (batch, width)
    return {
        "query": torch.zeros(batch, 1, heads, rank + rope, dtype=torch.bfloat16),
        "kv_cache": torch.zeros(num_pages, page_size, rank + rope, dtype=torch.bfloat16),
        "workspace_buffer": torch.zeros(1 << 20, dtype=torch.uint8),
        "block_tables": torch.zeros(tables, dtype=torch.int32),
        "seq_lens": torch.full((batch,), 1, dtype=torch.int32),
        "out": torch.zeros(batch, 1, heads, rank, dtype=torch.bfloat16),
    }


# id -> (function, accepts); holding the function keeps its id from being reused.
_ACCEPTS_COUNTER: dict[int, tuple[Any, bool]] = {}


def trtllm_call(function: Any, t: dict[str, Any], max_seq_len: int, **extra: Any) -> Any:
    """TensorRT-LLM's call pattern (shared/flashinfer-notes.md): 16 positional
    arguments, then backend/is_var_seq/uses_shared_paged_kv_idx and, where the
    callee accepts it (flashinfer >= 0.6.15, and fi_compat.mla_decode
    everywhere), multi_ctas_kv_counter_buffer."""
    import inspect

    known = _ACCEPTS_COUNTER.get(id(function))
    if known is None:
        known = (function, "multi_ctas_kv_counter_buffer" in inspect.signature(function).parameters)
        _ACCEPTS_COUNTER[id(function)] = known
    accepts = known[1]
    if accepts:
        extra.setdefault("multi_ctas_kv_counter_buffer", None)
    return function(
        t["query"], t["kv_cache"], t["workspace_buffer"], 128, 512, 64, t["block_tables"], t["seq_lens"],
        max_seq_len, 0, t["out"], 1.0, 1.0, None, None, False,
        backend="trtllm-gen", is_var_seq=True, uses_shared_paged_kv_idx=False, **extra,
    )


def launch_signature(launch: Any) -> tuple:
    """A comparable view of a recorded launch: tensors by (shape, dtype, stride),
    the rest by value, with max_seq_len (compared separately) blanked out."""
    ints = [i for i, a in enumerate(launch.args) if type(a) is int]
    max_seq_len_index = ints[1] if len(ints) > 1 else None
    out = []
    for index, value in enumerate(launch.args):
        if index == max_seq_len_index:
            out.append("max_seq_len")
            continue
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            out.append(("tensor", tuple(value.shape), str(value.dtype), tuple(value.stride())))
        elif isinstance(value, (list, tuple)):
            out.append(("seq", len(value)))
        else:
            out.append(value)
    return tuple(out)


def site_without_flashinfer(tmp_path: "Path") -> "Path":
    """A site directory with every package of this environment except
    flashinfer (symlinks), for running fi_compat as if flashinfer were absent
    (``python -S`` with it on ``PYTHONPATH``)."""
    import sysconfig
    from pathlib import Path

    purelib = Path(sysconfig.get_paths()["purelib"])
    site = Path(tmp_path) / "site"
    if site.exists():
        return site
    site.mkdir()
    for entry in purelib.iterdir():
        lowered = entry.name.lower()
        if lowered.startswith("flashinfer") or lowered.startswith("__editable__") or lowered.endswith(".pth"):
            continue
        (site / entry.name).symlink_to(entry)
    return site


def trtllm_style_memo(original: Any) -> Any:
    """TensorRT-LLM's workaround as shared/flashinfer-notes.md describes it (it
    cannot be installed here): a dict memo on the builder, cleared whole at 256
    entries, marked ``_trtllm_mla_tuning_config_cache = True``, with no
    ``__wrapped__``.  Written for these tests, not copied."""
    entries: dict = {}

    def memoized(**kwargs: Any) -> Any:
        key = tuple((name, tuple(v.shape) if hasattr(v, "shape") else repr(v)) for name, v in sorted(kwargs.items()))
        if key not in entries:
            if len(entries) >= 256:
                entries.clear()
            entries[key] = original(**kwargs)
        return entries[key]

    memoized._trtllm_mla_tuning_config_cache = True
    memoized._inner = original  # for the tests only
    return memoized


def build_meta_config(core: Any, max_seq_len: int, width: int) -> Any:
    """flashinfer's builder on ``meta`` tensors (shapes only: 64 pages of 32,
    ``width`` block-table columns), trtllm-gen runner, as the decode path calls it."""
    import torch

    return core._build_mla_decode_tuning_config(
        kv_cache=torch.empty(64, 32, 576, device="meta"),
        block_tables=torch.empty(2, width, dtype=torch.int32, device="meta"),
        workspace_buffer=torch.empty(1 << 20, dtype=torch.uint8, device="meta"),
        runner_names=["trtllm-gen"], q_len=1, num_heads=128, kv_lora_rank=512,
        max_seq_len=max_seq_len, device=torch.device("cpu"),
    )
