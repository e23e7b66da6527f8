"""Helpers shared by the tests (not a fixture module).

Shapes and each engine's call come from :mod:`fi_compat.workload.workload`;
the matrix's own helpers are fixtures in tests/matrix/conftest.py and
tests/matrix/decode_driver.py.  ``decode_inputs``, ``trtllm_call`` and
``launch_signature`` remain for tests/matrix/test_call_api.py only (it passes
extra keywords through TensorRT-LLM's call): move it to the workload and
delete them.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from packaging.version import Version

from fi_compat.model.release_detection import detect_release


def environ_without_fi_compat_settings() -> dict[str, str]:
    """``os.environ`` less every ``FI_COMPAT_*`` variable: a test's subprocess
    sets fi_compat's settings itself (fi_compat reads them on every call)."""
    return {name: value for name, value in os.environ.items() if not name.startswith("FI_COMPAT_")}


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


def site_without_flashinfer(tmp_path: Path) -> Path:
    """A site directory with every package of this environment except
    flashinfer (symlinks), for running fi_compat as if flashinfer were absent
    (``python -S`` with it on ``PYTHONPATH``).  Every site-packages directory
    on ``sys.path`` counts, this environment's first: the nox sessions layer
    their own venv over a shared base (noxfile.py)."""
    import sysconfig
    from pathlib import Path

    purelib = Path(sysconfig.get_paths()["purelib"])
    site = Path(tmp_path) / "site"
    if site.exists():
        return site
    site.mkdir()
    others = [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p) != purelib]
    for directory in [purelib, *others]:
        if not directory.is_dir():
            continue
        for entry in directory.iterdir():
            lowered = entry.name.lower()
            if lowered.startswith("flashinfer") or lowered.startswith("__editable__") or lowered.endswith(".pth") \
                    or (site / entry.name).exists():
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
    from fi_compat.workload.builder import builder_arguments

    return core._build_mla_decode_tuning_config(**builder_arguments(tables=(2, width), max_seq_len=max_seq_len))


def entry_arguments(function: Any) -> "contextlib.AbstractContextManager[list[dict[str, Any]]]":
    """Record what each call of ``function`` receives, parameter by parameter,
    as its own frame sees it on entry (``sys.setprofile``; innermost function
    under ``functools.wraps``/``functools.cache``/wrapt proxies).  A list of
    ``name -> value`` dicts, one per call, for asserting that every value
    reached the parameter of its name."""
    import inspect

    code = inspect.unwrap(function).__code__
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]

    @contextlib.contextmanager
    def recording():
        seen: list[dict[str, Any]] = []
        previous = sys.getprofile()

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code is code:
                local = frame.f_locals
                seen.append({name: local[name] for name in names if name in local})

        sys.setprofile(profile)
        try:
            yield seen
        finally:
            sys.setprofile(previous)

    return recording()


def launch_scales(launch: Any) -> tuple:
    """``(max_seq_len, bmm1_scale, bmm2_scale)`` as a recorded decode launch
    received them: every release 0.6.13-0.7.4 passes the two scales right
    after max_seq_len (the second plain ``int``) to ``trtllm_paged_attention_decode``."""
    ints = [index for index, value in enumerate(launch.args) if type(value) is int]
    at = ints[1]
    return launch.args[at], launch.args[at + 1], launch.args[at + 2]


def vllm_call(function: Any, t: dict[str, Any], max_seq_len: int, **extra: Any) -> Any:
    """vLLM 0.30's call (/work/scratch/engines/FACTS.md 3.2): every argument by
    keyword, a 2-D block table shared by K and V, backend left at ``auto``."""
    return function(
        query=t["query"], kv_cache=t["kv_cache"], workspace_buffer=t["workspace_buffer"], qk_nope_head_dim=128,
        kv_lora_rank=512, qk_rope_head_dim=64, block_tables=t["block_tables"][:, 0], seq_lens=t["seq_lens"],
        max_seq_len=max_seq_len, bmm1_scale=extra.pop("bmm1_scale", 1.0), bmm2_scale=extra.pop("bmm2_scale", 1.0),
        return_lse=False, **extra,
    )


def sglang_call(function: Any, t: dict[str, Any], max_seq_len: int, **extra: Any) -> Any:
    """SGLang 0.5.21's call (FACTS.md 2.2): keywords in its own order, no
    ``bmm2_scale`` (the default applies), ``enable_pdl`` and the softmax-skip
    factor passed, a 2-D shared block table."""
    return function(
        query=t["query"], kv_cache=t["kv_cache"], enable_pdl=False, workspace_buffer=t["workspace_buffer"],
        qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=t["block_tables"][:, 0],
        seq_lens=t["seq_lens"], max_seq_len=max_seq_len, bmm1_scale=extra.pop("bmm1_scale", 1.0), return_lse=False,
        skip_softmax_threshold_scale_factor=None, **extra,
    )


# --------------------------------------------------------------------------- what the device refuses

#: Modules whose frames are fi_compat's own code.  fi_compat.workload is left out:
#: its CPU shim and loader stub stand in for the device and for flashinfer's
#: kernel loader, so an error raised there on flashinfer's behalf is the host's
#: answer to flashinfer, as torch's would be on a real device.
_FI_COMPAT = "fi_compat"
_FI_COMPAT_HOST = "fi_compat.workload"


def _owner(module: str) -> str | None:
    if module == "flashinfer" or module.startswith("flashinfer."):
        return "flashinfer"
    if module == _FI_COMPAT_HOST or module.startswith(_FI_COMPAT_HOST + "."):
        return None
    if module == _FI_COMPAT or module.startswith(_FI_COMPAT + "."):
        return "fi_compat"
    return None


#: How Python words a call its target's signature refuses (raised in the
#: caller's frame, before the target runs): ``name() got an unexpected keyword
#: argument 'x'``, ``... missing 1 required positional argument``, and so on.
_SIGNATURE_REFUSAL = re.compile(r"^([A-Za-z_][\w.]*)\(\) (got an unexpected keyword argument|missing \d+ required|"
                                r"takes \d+|takes from \d+|got multiple values|got some positional-only)")


def _flashinfer_function_named(qualname: str) -> bool:
    """Whether a loaded flashinfer module defines a function or class member
    of this qualified name (the name a signature refusal quotes)."""
    head, *rest = qualname.split(".")
    for name, module in list(sys.modules.items()):
        if not (name == "flashinfer" or name.startswith("flashinfer.")) or module is None:
            continue
        found = getattr(module, head, None)
        for part in rest:
            found = getattr(found, part, None)
        if callable(found) and str(getattr(found, "__module__", "")).startswith("flashinfer"):
            return True
    return False


def raised_by_flashinfer(error: BaseException) -> bool:
    """Whether ``error`` came out of flashinfer's code: of the frames its
    traceback passes through, the innermost one that belongs to flashinfer or
    to fi_compat (fi_compat.workload, the host stand-in, counts as neither)
    is flashinfer's.  Frames of torch, CUTLASS DSL or the CUDA runtime below
    flashinfer are flashinfer's callees; test code around it is neither.  So
    an error raised in fi_compat, or in a test helper with no flashinfer frame
    below it, is not flashinfer's, whatever its type.  One exception: a
    TypeError with no frame of either, whose message is Python's refusal of
    a call by the signature of a function flashinfer defines (a release
    without a keyword the caller passes: ``...() got an unexpected keyword
    argument 'enable_dcp'`` on releases before decode context parallelism),
    is that release's refusal; the same TypeError with a fi_compat frame
    inside (fi_compat passed the keyword on) is fi_compat's.  Costs one walk
    of the traceback (and, for such a TypeError, of ``sys.modules``)."""
    owner = None
    tb = error.__traceback__
    while tb is not None:  # outermost to innermost: the last owned frame wins
        found = _owner(str(tb.tb_frame.f_globals.get("__name__", "")))
        if found is not None:
            owner = found
        tb = tb.tb_next
    if owner is None and isinstance(error, TypeError):
        refused = _SIGNATURE_REFUSAL.match(str(error))
        return refused is not None and _flashinfer_function_named(refused.group(1))
    return owner == "flashinfer"


def describe_error(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def flashinfer_refusal(call: Callable[[], Any]) -> BaseException | None:
    """Run ``call``; ``None`` when it returns, the exception when flashinfer
    raised it, whatever its type (a device refuses a kernel with ValueError on
    one release, NotImplementedError on another, and AttributeError deep in
    flashinfer's tuner on SM90 with 0.7.4).  Anything else is re-raised
    unchanged: an error from fi_compat's code, or from the test's own code
    before flashinfer is reached, fails the test.  Only ``Exception`` is
    caught: pytest's skip/fail outcomes and KeyboardInterrupt pass through."""
    try:
        call()
    except Exception as error:
        if not raised_by_flashinfer(error):
            raise
        return error
    return None
