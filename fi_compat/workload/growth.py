"""Python-heap growth over a stretch of calls, measured one way everywhere.

A bounded cache is judged by what a long run of distinct ``max_seq_len``
values still adds to the heap: ``tracemalloc``'s traced total after a full
``gc.collect()``, read before and after the stretch.  Timings must never be
taken inside :func:`traced` (tracing slows Python code several-fold); time a
separate, untraced pass.

    with traced() as memory:
        for length in lengths: call(length)
        grown = memory.grown()      # bytes since the start (or the last restart)

Cost: one ``gc.collect()`` per reading; tracing itself while the block runs.
With ``enabled=False`` nothing is traced and :meth:`Traced.grown` returns
``None``, so one loop serves the traced and the timed pass.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from typing import Iterator, Optional


class Traced:
    """Readings of the traced heap inside :func:`traced`."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.start = tracemalloc.get_traced_memory()[0] if enabled else 0

    def grown(self) -> Optional[int]:
        """Bytes the traced heap grew since the start (after ``gc.collect()``);
        ``None`` when tracing is off."""
        if not self.enabled:
            return None
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - self.start

    def restart(self) -> None:
        """Count from here on (after ``gc.collect()``): for a warm-up inside the traced block."""
        if self.enabled:
            gc.collect()
            self.start = tracemalloc.get_traced_memory()[0]


@contextlib.contextmanager
def traced(enabled: bool = True) -> Iterator[Traced]:
    """Collect garbage, start ``tracemalloc`` (when ``enabled``), and stop it on
    exit, also when the block raises.  Nests with no outer tracing only:
    an already running ``tracemalloc`` is stopped on exit all the same."""
    gc.collect()
    if enabled:
        tracemalloc.start()
    try:
        yield Traced(enabled)
    finally:
        if enabled:
            tracemalloc.stop()


__all__ = ["Traced", "traced"]
