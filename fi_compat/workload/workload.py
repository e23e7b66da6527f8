"""The MLA decode workload under the names its callers import: the engines' records and calls
(:mod:`fi_compat.workload.engines`, :mod:`~fi_compat.workload.engine_model`) and what changes from batch to batch
(:mod:`fi_compat.workload.streams`), in one namespace for the soak, the benchmarks, the audit
and the tests, and the helpers that take a layout by name (:func:`make_inputs`,
:func:`call`).  An engine's call is written in its
:class:`~fi_compat.workload.engines.Engine` record only.  Imports neither torch nor flashinfer.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from . import engine_model, engines, streams
from .engine_model import *  # noqa: F403  (re-exported: the names callers import from here)
from .engine_model import Engine, Inputs
from .engines import *  # noqa: F403
from .engines import resolve
from .streams import *  # noqa: F403


def make_inputs(torch: Any, layout: Union[str, Engine], **shape: Any) -> Inputs:
    """Zeros of ``layout``'s shapes: :meth:`Engine.inputs <fi_compat.workload.engine_model.Engine.inputs>`
    of the record named (its workspace by default); ``shape`` as that method takes it."""
    return resolve(layout).inputs(torch, **shape)


def call(
    layout: Union[str, Engine], decode: Callable[..., Any], t: Inputs, max_seq_len: int, backend: Optional[str] = None
) -> Any:
    """One engine's call (``backend``: ``None`` for the engine's own)."""
    return resolve(layout).call(decode, t, max_seq_len, backend)


__all__ = [*engine_model.__all__, *engines.__all__, *streams.__all__, "call", "make_inputs"]
