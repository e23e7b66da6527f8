"""The doctor's report, as the library and ``fi-compat doctor`` both make it.

:func:`doctor_report` is the in-process entry (``fi_compat.doctor_report``);
:func:`gather` builds the report as a dict and :func:`format_text` prints it.
The sections, one module each: :mod:`.environment` (fi_compat, Python,
torch, the flashinfer release and how it was detected), :mod:`.verdicts`
(the verdict on every bounded cache and the call API's decode signature, by
the lookup ``install()`` uses), :mod:`.sections` (what is installed,
TensorRT-LLM's workaround, the census of flashinfer's caches, the settings).
The command line lives in :mod:`fi_compat.commands.doctor`; this package
imports nothing from the commands.  docs/doctor.md explains each line.

:func:`gather` returns a fixed set of keys (:data:`SCHEMA_VERSION`,
:data:`TOP_LEVEL_KEYS`, :data:`SECTION_KEYS`).
"""

from __future__ import annotations

from .environment import FLASHINFER_KEYS, TORCH_KEYS, import_flashinfer
from .gather import SCHEMA_VERSION, TOP_LEVEL_KEYS, gather
from .sections import CENSUS_KEYS, INSTALLED_KEYS, SETTING_KEYS, TRTLLM_KEYS
from .text import format_text
from .verdicts import CALL_API_KEYS, WATCH_KEYS

SECTION_KEYS = {
    "fi_compat": ("version", "path"),
    "python": ("version", "implementation", "executable", "platform"),
    "torch": TORCH_KEYS,
    "flashinfer": FLASHINFER_KEYS,
    "bounds": ("checked_on", "outcome", "reason", "rows"),
    "call_api": CALL_API_KEYS,
    "installed": INSTALLED_KEYS,
    "trtllm_workaround": TRTLLM_KEYS,
    "census": CENSUS_KEYS,
    "watch": WATCH_KEYS,
}


def doctor_report() -> str:
    """The doctor's report on *this* process, as text (log it from inside an engine).

    Reads what is already there: the installed state, the verdicts through
    the live functions when flashinfer is imported (or its source when not),
    TensorRT-LLM's workaround, the census of flashinfer's caches.  Imports
    neither torch, flashinfer nor tensorrt_llm, installs nothing, never raises
    for a missing or broken flashinfer (the report says what it could not do).
    Cost: one census pass over the loaded flashinfer modules and one verdict
    per bounded cache, about 0.1 s with flashinfer 0.6.18 imported
    (docs/doctor.md); call it once after warm-up or from a debug endpoint,
    never per request.
    """
    return format_text(gather(in_process=True))


__all__ = [
    "SCHEMA_VERSION",
    "SECTION_KEYS",
    "SETTING_KEYS",
    "TOP_LEVEL_KEYS",
    "doctor_report",
    "format_text",
    "gather",
    "import_flashinfer",
]
