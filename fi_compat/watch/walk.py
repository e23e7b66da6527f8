"""The watch's walk: which flashinfer modules it visits, in what order, and the containers it records there.

One job: the :class:`Walking` half of :class:`fi_compat.watch.state.Watch`: the
stack sample, the queue of modules, the walk a bounded slice at a time through
:func:`fi_compat.counting.memo_walk.module_nodes` (the one walker the census uses
too), recording each container, and :func:`locate`, a container's path found
again when it is reported.
"""

from __future__ import annotations

import types
from collections import deque
from typing import Any, Callable, Iterator, Optional

from ..counting import memo_walk
from ..lookup.modules import loaded, loaded_names
from ..model.specs import CORE_MODULE, PACKAGE
from .records import STACK_DEPTH, Containers, container_kind


def _flashinfer(name: Any) -> bool:
    return isinstance(name, str) and (name == PACKAGE or name.startswith(PACKAGE + "."))


def locate(containers: Containers, row: int) -> tuple[str, str]:
    """``(path, where)`` of a tracked container: the module it was reached from walked
    again, by name, until the container is reached (one module's objects, at report time only)."""
    obj, module_name = containers.objects[row], containers.module_names[containers.module[row]]
    module = loaded(module_name)
    if module is not None:
        for path, value, where, _depth in memo_walk.module_nodes(module_name, module, set()):
            if value is obj:
                return path, memo_walk._code_where(value) if container_kind(value) == "functools" else where
    return f"{module_name}.?", ""


class Walking:
    """The walk's part of a watch's state and steps (mixed into :class:`~fi_compat.watch.state.Watch`)."""

    clock: Callable[[], float]
    containers: Containers
    hot: list[int]

    def _init_walk(self) -> None:
        self.roots: deque[tuple[str, Any, int]] = deque()  # level 2: running code's module, 1: its neighbour
        self.rooted: set[int] = set()  # modules (by id) queued or walked in this walk
        self.nodes: Optional[Iterator[memo_walk.Node]] = None  # the module being walked
        self.walking: tuple[str, bool] = ("", False)  # its name, and whether its containers are hot
        self.all_queued = False
        self.walks = 0  # complete walks

    def _sample_stack(self, frame: Any) -> None:
        for _ in range(STACK_DEPTH):
            if frame is None:
                break
            name = frame.f_globals.get("__name__")
            if _flashinfer(name):
                self._queue_module(name, 2)
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

    def _begin_module(self, name: str, module: Any, level: int) -> None:
        """Start walking ``module``: queue the flashinfer modules it holds and the homes of its
        re-exports (a re-export's home module holds its memo's neighbours), one level below it."""
        level = 2 if name == CORE_MODULE else level
        for attribute, item in getattr(module, "__dict__", {}).copy().items():
            if attribute.startswith("__") and attribute.endswith("__"):
                continue
            home = item.__name__ if isinstance(item, types.ModuleType) else getattr(item, "__module__", None)
            if _flashinfer(home) and home != name:
                self._queue_module(home, level - 1)
        # a fresh set per module: the walk's own memory stays one module's; an object another module
        # holds too is visited again there, and tracked once (Containers.add tests identity).  What
        # a module re-exports is left to its home module's walk, except from a module the decode
        # path runs in: everything it reaches is the decode path's (the AutoTuner class, its instance)
        self.nodes = memo_walk.module_nodes(name, module, set(), named=False, own=level < 2)
        self.walking = (name, level == 2)

    def _walk(self, deadline: float) -> bool:
        """Walk on until ``deadline``; ``True`` when this call completed a walk of every module."""
        clock, containers = self.clock, self.containers
        while True:
            if self.nodes is None:
                if not self.roots:
                    if not self.all_queued:
                        for name in loaded_names(PACKAGE):
                            self._queue_module(name)
                        self.all_queued = True
                    if not self.roots:
                        self._walk_completed()
                        return True
                name, module, level = self.roots.popleft()
                self._begin_module(name, module, level)
                if clock() >= deadline:
                    return False
                continue
            module_name, hot = self.walking
            count = 0
            for _path, value, _where, _depth in self.nodes:
                kind = container_kind(value)
                if kind is not None:
                    row = containers.add(value, kind, module_name, hot)
                    if row is not None and hot:
                        self.hot.append(row)
                count += 1
                if count % 32 == 0 and clock() >= deadline:
                    return False
            self.nodes = None
            if clock() >= deadline:
                return False

    def _walk_completed(self) -> None:
        """A walk reached every module: the next one starts over (containers created since are found then)."""
        self.walks += 1
        self.rooted.clear()
        self.all_queued = False
