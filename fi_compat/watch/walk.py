"""The watch's walk: which flashinfer modules it visits, in what order, and the containers it records there.

One job: the :class:`Walking` half of :class:`fi_compat.watch.state.Watch`
(the stack sample, the queue of modules, the walk a bounded slice at a time,
recording a container, one slice of the pass that reads their sizes).
"""

from __future__ import annotations

import types
from collections import deque
from typing import Any, Callable, Iterator

from ..counting import memo_walk
from ..lookup.modules import loaded, loaded_names
from ..model.specs import CORE_MODULE
from .records import (
    FUNCTOOLS,
    MAX_REWALK_S,
    MAX_TRACKED,
    STACK_DEPTH,
    Tracked,
    _children,
    _flashinfer,
    _kind,
    _near,
    _read,
    _size,
    _worth,
)


class _Resume:
    """Where the walk stopped inside one object's links (a step ends on time, not on an object)."""

    __slots__ = ("children", "here")

    def __init__(self, children: Iterator[tuple[str, Any]], here: str) -> None:
        self.children, self.here = children, here


class Walking:
    """The walk's part of a watch's state and steps (mixed into :class:`~fi_compat.watch.state.Watch`)."""

    clock: Callable[[], float]
    roots: deque[tuple[str, Any, int]]
    rooted: set[int]
    seen: set[int]
    stack: list[tuple[str, Any, int, str, bool]]
    tracked: dict[int, Tracked]
    order: list[Tracked]
    hot: list[Tracked]
    cursor: int
    passes: int
    all_queued: bool
    rewalk_at: float
    rewalk_gap: float

    def _sample_stack(self, frame: Any) -> None:
        for _ in range(STACK_DEPTH):
            if frame is None:
                break
            name = frame.f_globals.get("__name__")
            if _flashinfer(name):
                module = loaded(name)
                if module is not None and id(module) not in self.rooted:
                    self.rooted.add(id(module))
                    self.roots.appendleft((name, module, 2))
            frame = frame.f_back

    def _queue_module(self, name: str, level: int = 0) -> None:
        """Queue a module to walk: ``level`` 2 for a module the decode path runs in,
        1 for one such a module holds names of (walked next, its containers read every step), else 0."""
        module = loaded(name)
        if module is not None and id(module) not in self.rooted:
            self.rooted.add(id(module))
            if level:
                self.roots.appendleft((name, module, level))
            else:
                self.roots.append((name, module, level))

    def _rewalk(self, now: float) -> None:
        self.rooted.clear()
        self.seen.clear()
        self.all_queued = False
        self.rewalk_gap = min(self.rewalk_gap * 2, MAX_REWALK_S)
        self.rewalk_at = now + self.rewalk_gap

    def _walk(self, deadline: float) -> None:
        clock, seen, stack = self.clock, self.seen, self.stack
        while True:
            if not stack:
                # a module walked: forget what it visited (the walk's own memory stays the size of one
                # module's; an object another module holds too is visited again there, and tracked once)
                seen.clear()
                if not self.roots:
                    if self.all_queued:
                        return
                    for name in loaded_names(memo_walk.PACKAGE):
                        self._queue_module(name)
                    self.all_queued = True
                    if not self.roots:
                        return
                name, module, level = self.roots.popleft()
                level = 2 if name == CORE_MODULE else level
                hot = level == 2
                where = memo_walk._module_where(module)
                for attribute, item in reversed(getattr(module, "__dict__", {}).copy().items()):
                    if attribute.startswith("__") and attribute.endswith("__"):
                        continue
                    if isinstance(item, types.ModuleType):
                        if _flashinfer(getattr(item, "__name__", None)):
                            self._queue_module(item.__name__, level - 1)
                        continue
                    owner = getattr(item, "__module__", None)
                    if _flashinfer(owner) and owner != name and isinstance(owner, str):
                        # a re-export: its home module holds its memo's neighbours
                        self._queue_module(owner, level - 1)
                    if id(item) not in seen:
                        seen.add(id(item))
                        if _worth(item):
                            # a module's own containers, and those in its thread-locals and its functions'
                            # closures, are read from this step on; what lies deeper, as the walk gets there
                            self._record(f"{name}.{attribute}", item, where, hot)
                            near_where = memo_walk._code_where(item) if isinstance(item, types.FunctionType) else where
                            for link, inner in _near(item):
                                self._record(f"{name}.{attribute}.{link}", inner, near_where or where, hot)
                            stack.append((f"{name}.{attribute}", item, 1, where, hot))
                if clock() >= deadline:
                    return
                continue
            path, value, depth, context, hot = stack.pop()
            if type(value) is _Resume:  # the rest of a large object's links, left by an earlier step
                children, here, depth = value.children, value.here, depth
            else:
                here = self._record(path, value, context, hot)
                if depth >= memo_walk.MAX_DEPTH:
                    continue
                children = _children(value)
            visited = 0
            try:
                for link, child in children:
                    visited += 1
                    if id(child) not in seen:
                        seen.add(id(child))
                        if _worth(child):
                            joined = f"{path}.{link}" if link and not link.startswith("[") else f"{path}{link}"
                            stack.append((joined, child, depth + 1, here, hot))
                    if visited % 16 == 0 and clock() >= deadline:
                        stack.append((path, _Resume(children, here), depth, context, hot))
                        return
            except Exception:  # noqa: BLE001  (an object whose attributes raise: the rest is not walked)
                pass
            if clock() >= deadline:
                return

    def _record(self, path: str, value: Any, context: str, hot: bool) -> str:
        kind = _kind(value)
        if kind is not None and id(value) not in self.tracked and len(self.tracked) < MAX_TRACKED:
            where = memo_walk._code_where(value) if kind == FUNCTOOLS else context
            tracked = Tracked(value, kind, path, where or context, 0, 0, hot=hot)
            try:
                tracked.first = tracked.last = _size(tracked)
            except Exception:  # noqa: BLE001
                return context
            self.tracked[id(value)] = tracked
            (self.hot if hot else self.order).append(tracked)
        if isinstance(value, type):
            return memo_walk._class_where(value)
        if isinstance(value, types.FunctionType):
            return memo_walk._code_where(value) or context
        return context

    def _read_sizes(self, deadline: float) -> bool:
        """Continue the pass over the tracked containers; True when a pass ended."""
        order, clock = self.order, self.clock
        count = len(order)
        while self.cursor < count:
            tracked = order[self.cursor]
            self.cursor += 1
            _read(tracked)
            if self.cursor % 16 == 0 and clock() >= deadline:
                return False
        self.cursor = 0
        self.passes += 1
        return True
