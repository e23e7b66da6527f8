"""Driver for tests/matrix/test_orders.py: every order of five events, each in
a process where it really happens in that order.

    python tests/matrix/orders_driver.py OUT_DIR

Events: ``import`` (import flashinfer under the CPU shim), ``install``
(``install(maxsize=32)``), ``uninstall``, ``second-install``
(``install(maxsize=64)``: other settings, so it re-installs with them; the
bound in force tells which one took effect) and ``workaround`` (TensorRT-LLM's builder
memo replaces ``_build_mla_decode_tuning_config``; like TensorRT-LLM, it
imports flashinfer first if needed).  All 120 orders from
``itertools.permutations``.

Why forks: "import flashinfer" cannot be undone, and a fresh interpreter per
order costs ~5 s (torch + flashinfer), 10 minutes for 120 orders.  Everything
before the first importing event touches only fi_compat's own state, and
after it that state is all that the import sees.  So:

1. the root process imports torch and fi_compat (not flashinfer);
2. each distinct pre-import prefix runs in a fork of the root and is checked
   step by step against the model (16 prefixes, milliseconds each);
3. the prefixes leave one of four fi_compat states (not installed with or
   without the post-import hook registered, pending with 32 or with 64): one
   fork per state runs a representative prefix and *really* imports flashinfer
   there, so the post-import hook fires as it would;
4. each order then runs in a fork of its state's process: the importing event
   (plus the workaround, if that was it), the rest of the order, a check of
   state / patched attributes / calls after every step, and a final
   uninstall() that must restore every flashinfer attribute (identity).

Each order writes ``OUT_DIR/order-<n>.json``; each prefix ``prefix-<n>.json``.
Nothing here is collected by pytest (the file name does not start with test_).
``tests/`` must be on ``PYTHONPATH`` (``support.trtllm_style_memo``).
"""

from __future__ import annotations

import faulthandler
import importlib
import itertools
import json
import os
import signal
import sys
import time
import traceback
from types import ModuleType
from typing import Any, Callable, Optional

EVENTS = ("import", "install", "uninstall", "second-install", "workaround")
IMPORTING = ("import", "workaround")
SIZES = {"install": 32, "second-install": 64}
CORE = "flashinfer.mla._core"
BUILDER = "_build_mla_decode_tuning_config"
CONFIG = "_mla_decode_tuning_config"
TIMEOUT_S = 120


def all_orders() -> list[tuple[str, ...]]:
    return list(itertools.permutations(EVENTS))


def split(order: tuple[str, ...]) -> tuple[tuple[str, ...], int]:
    """The events before the first importing one, and that one's index."""
    index = next(i for i, event in enumerate(order) if event in IMPORTING)
    return order[:index], index


# --------------------------------------------------------------------------- the model


class Model:
    """What fi_compat and flashinfer should look like after each event."""

    def __init__(self, cached_family: bool) -> None:
        self.cached_family = cached_family  # 0.6.15.post1+: a functools.cache to bound
        self.imported = False
        self.phase = "not-installed"
        self.maxsize: Optional[int] = None
        self.hook = False  # a post-import hook registered (wrapt cannot unregister it)
        self.workaround = False
        self.workaround_over_proxy = False  # the memo wraps a fi_compat proxy...
        self.inner_proxy_active = False  # ...which is still active
        self.proxy_over_workaround = False  # fi_compat's builder memo wraps TensorRT-LLM's
        self.builder_patched = False
        self.config_patched = False

    def key(self) -> tuple:
        """The pre-import state: all that the import can see."""
        return (self.phase, self.maxsize if self.phase == "pending" else None, self.hook)

    def apply(self, event: str) -> None:
        if event in SIZES:
            # install() again with other settings re-installs with them; with the same, a no-op
            if self.phase == "not-installed" or SIZES[event] != self.maxsize:
                if self.phase != "not-installed":
                    self.apply("uninstall")
                self.maxsize = SIZES[event]
                if self.imported:
                    self._install()
                else:
                    self.phase, self.hook = "pending", True
        elif event == "uninstall":
            self.phase = "not-installed"
            self.builder_patched = self.config_patched = self.proxy_over_workaround = False
            self.inner_proxy_active = False
        elif event == "import":
            if not self.imported:
                self.imported = True
                if self.phase == "pending":
                    self._install()
        elif event == "workaround":
            self.apply("import")
            self.workaround = True
            # On top of fi_compat's proxy, the memo leaves that patch in place
            # (inside it): status() still lists it until uninstall().
            self.workaround_over_proxy = self.inner_proxy_active = self.builder_patched
        else:
            raise ValueError(event)

    def _install(self) -> None:
        # fi_compat memoizes the builder whatever is there: flashinfer's, or
        # TensorRT-LLM's memo (which keys on the exact max_seq_len and misses per batch).
        self.config_patched = self.cached_family
        self.builder_patched = True
        self.proxy_over_workaround = self.workaround
        self.phase = "installed"

    def position(self) -> Optional[str]:
        """``status()["trtllm_workaround"]["position"]``."""
        if not self.workaround:
            return None
        if self.proxy_over_workaround:
            return "inside fi_compat's builder memo"
        return "around fi_compat's builder memo" if self.builder_patched else "alone"


# --------------------------------------------------------------------------- the events


class Runner:
    def __init__(self, host: Any) -> None:
        self.host = host
        self.snapshot: dict[tuple[str, str], Any] = {}
        self.workaround: Optional[Callable] = None

    def do(self, event: str) -> None:
        import fi_compat

        if event in SIZES:
            fi_compat.install(maxsize=SIZES[event])
        elif event == "uninstall":
            fi_compat.uninstall()
        elif event == "import":
            self.import_flashinfer()
        elif event == "workaround":
            self.import_flashinfer()
            core = sys.modules[CORE]
            from helpers.support import trtllm_style_memo  # tests/ is on PYTHONPATH (test_orders.py)

            self.workaround = trtllm_style_memo(getattr(core, BUILDER))
            setattr(core, BUILDER, self.workaround)

    def import_flashinfer(self) -> None:
        if "flashinfer" in sys.modules:
            importlib.import_module(CORE)  # a second import is a no-op
            return
        self.host.patch_flashinfer()  # the real import (post-import hooks fire) + launch recorder
        self.snapshot = originals()


def flashinfer_modules() -> list[tuple[str, ModuleType]]:
    return [(n, m) for n, m in list(sys.modules.items())
            if isinstance(m, ModuleType) and (n == "flashinfer" or n.startswith("flashinfer."))]


def originals() -> dict[tuple[str, str], Any]:
    """Every flashinfer attribute right after the import, with any fi_compat
    proxy the post-import hook already put in place replaced by its original."""
    from fi_compat.memo.proxies import is_fi_compat_proxy

    snapshot = {}
    for name, module in flashinfer_modules():
        for attribute, value in list(vars(module).items()):
            snapshot[(name, attribute)] = value.__wrapped__ if is_fi_compat_proxy(value) else value
    return snapshot


# --------------------------------------------------------------------------- checks


def member_owners() -> set[str]:
    """``module.Class`` (where defined) of every row that patches a class member."""
    from fi_compat.verdict.bounds import BOUNDS

    owners = set()
    for bound in BOUNDS:
        if "." in bound.spec.name:
            owner = getattr(sys.modules.get(bound.spec.module), bound.spec.name.split(".")[0], None)
            if isinstance(owner, type):
                owners.add(f"{owner.__module__}.{owner.__qualname__}")
    return owners


def proxy_locations(classes: Optional[set[str]] = None) -> list[str]:
    """Every module attribute of flashinfer that holds a fi_compat proxy, and
    every class member (of the classes named in ``classes``, or all: 30 ms)."""
    from fi_compat.memo.proxies import is_fi_compat_proxy

    found = []
    for name, module in flashinfer_modules():
        for attribute, value in list(vars(module).items()):
            if is_fi_compat_proxy(value):
                found.append(f"{name}.{attribute}")
            if isinstance(value, type) and value.__module__ == name and (
                    classes is None or f"{name}.{attribute}" in classes):
                found += [f"{name}.{attribute}.{member}" for member, item in vars(value).items()
                          if is_fi_compat_proxy(getattr(item, "__func__", item))]
    return found


def check(model: Model, runner: Runner, step: str) -> None:
    import fi_compat
    from fi_compat.installing import installer
    from fi_compat.verdict.bounds import by_name
    from fi_compat.memo.proxies import is_fi_compat_proxy

    def expect(condition: bool, what: str) -> None:
        if not condition:
            raise AssertionError(f"after {step}: {what}")

    status = fi_compat.status()
    expect(status["state"] == model.phase, f"state {status['state']!r}, expected {model.phase!r}")
    expect(("flashinfer" in sys.modules) == model.imported, "flashinfer imported or not as expected")
    if model.phase in ("pending", "installed"):
        size = installer.settings()["cache_size"].value
        expect(size == model.maxsize, f"cache_size {size}, expected {model.maxsize}")
    if not model.imported:
        expect(status["patched"] == [] and status["caches"] == {}, f"patched {status['patched']} before import")
        return
    expect(status["trtllm_workaround"] == {"present": model.workaround, "position": model.position()},
           f"trtllm_workaround {status['trtllm_workaround']}")
    for row in status["bounds"]:  # the bound in force says which install took effect
        if row["fi_compat"] is not None:
            expected = model.maxsize * by_name(row["name"]).scale
            expect(row["fi_compat"]["maxsize"] == expected, f"{row['name']} maxsize {row['fi_compat']['maxsize']}")
    listed = set(status["patched"])
    listed |= set(status["watch"]["patched"] if status.get("watch") else ())  # the runtime watch's decode tick
    if model.workaround_over_proxy and not model.proxy_over_workaround:
        listed.discard(f"{CORE}.{BUILDER}")  # still listed: inside TensorRT-LLM's memo until uninstall()
    proxies = sorted(proxy_locations({where.rsplit(".", 1)[0] for where in listed} | member_owners()))
    expect(proxies == sorted(listed), f"proxies at {proxies}, status() lists {sorted(listed)}")
    # the two attributes the orders are about
    core = sys.modules[CORE]
    original_builder = runner.snapshot[(CORE, BUILDER)]
    builder = getattr(core, BUILDER)
    if model.workaround and not model.proxy_over_workaround:
        expect(builder is runner.workaround, "the builder is TensorRT-LLM's memo")
        inner = runner.workaround._inner
        if model.workaround_over_proxy:
            expect(is_fi_compat_proxy(inner) and inner.__wrapped__ is original_builder, "memo wraps fi_compat's proxy")
            expect(inner._self_active == model.inner_proxy_active, f"inner proxy active={inner._self_active}")
        else:
            expect(inner is original_builder, "memo wraps flashinfer's builder")
    elif model.builder_patched:
        wrapped = runner.workaround if model.proxy_over_workaround else original_builder
        expect(is_fi_compat_proxy(builder) and builder.__wrapped__ is wrapped, "builder proxied")
    else:
        expect(builder is original_builder, "builder is flashinfer's own")
    if (CORE, CONFIG) in runner.snapshot:
        config = getattr(core, CONFIG)
        original_config = runner.snapshot[(CORE, CONFIG)]
        if model.config_patched:
            expect(is_fi_compat_proxy(config) and config.__wrapped__ is original_config, "config proxied")
        else:
            expect(config is original_config, "config is flashinfer's own functools.cache")
    # and it all still works: the builder, and a decode launch through flashinfer
    call_builder_and_decode(runner, step)


def call_builder_and_decode(runner: Runner, step: str) -> None:
    import torch

    from fi_compat.model.specs import DECODE
    from fi_compat.workload import builder, workload

    core = sys.modules[CORE]
    config = getattr(core, BUILDER)(**builder.builder_arguments(tables=(1, 64), max_seq_len=300))
    if type(config).__name__ != "TuningConfig":
        raise AssertionError(f"after {step}: builder returned {type(config)}")
    runner.host.recorder.clear()
    import flashinfer.mla

    inputs = workload.make_inputs(torch, "trtllm", batch=1, width=64, page_size=32, num_pages=64,
                                  workspace_bytes=1 << 20)
    workload.trtllm_call(getattr(flashinfer.mla, DECODE.name), inputs, 999)
    launched = runner.host.launches[-1].max_seq_len
    if launched != 999:
        raise AssertionError(f"after {step}: launch max_seq_len {launched}")


def check_final_identity(model: Model, runner: Runner) -> None:
    """After a last uninstall(): every attribute is flashinfer's own object
    again (no proxy left in any class either), except the builder where
    TensorRT-LLM's memo stays (by design)."""
    import fi_compat

    fi_compat.uninstall()
    changed = [f"{where} is still a fi_compat proxy" for where in proxy_locations()]
    for name, module in flashinfer_modules():
        for attribute, value in list(vars(module).items()):
            expected = runner.snapshot.get((name, attribute), value)
            if (name, attribute) == (CORE, BUILDER) and model.workaround:
                expected = runner.workaround
            if value is not expected:
                changed.append(f"{name}.{attribute} is not the original object")
    if changed:
        raise AssertionError("after the final uninstall: " + "; ".join(changed[:5]))
    if model.workaround and model.workaround_over_proxy and runner.workaround._inner._self_active:
        raise AssertionError("the proxy inside TensorRT-LLM's memo is still active after uninstall")


# --------------------------------------------------------------------------- processes


def in_fork(body: Callable[[], Any], report_path: str) -> int:
    """Run ``body`` in a child; it writes ``report_path``.  Returns the pid.

    The child's own work (not the children it forks: :func:`work_done` ends
    it) runs under a faulthandler watchdog that writes every thread's stack
    to ``<report>.stacks`` and ends the child past ``TIMEOUT_S``; no alarm
    that a slow host's serial children would add up to."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    started = time.perf_counter()
    stacks = open(report_path + ".stacks", "w")
    try:
        faulthandler.dump_traceback_later(TIMEOUT_S, exit=True, file=stacks)
        report = body()
        work_done()
        report["elapsed_s"] = round(time.perf_counter() - started, 3)
        code = 0 if report.get("ok") else 1
    except BaseException:
        report = {"ok": False, "error": traceback.format_exc()}
    try:
        with open(report_path, "w") as handle:
            json.dump(report, handle)
    finally:
        os._exit(code)


def work_done() -> None:
    """This process's own work is done (what follows is waiting for its children): no watchdog."""
    faulthandler.cancel_dump_traceback_later()


def wait(pid: int, report_path: str) -> None:
    """Wait for the child and keep its exit status or signal in ``<report>.exit``."""
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    with open(report_path + ".exit", "w") as handle:
        json.dump({"exit": code if code >= 0 else None, "signal": signal.Signals(-code).name if code < 0 else None},
                  handle)


def outcome(report_path: str) -> dict:
    """What a child left: its report, or why there is none (its exit status or
    signal, and the stacks its watchdog wrote), never a bare "no report"."""
    try:
        with open(report_path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        pass
    why = {}
    try:
        with open(report_path + ".exit") as handle:
            why = json.load(handle)
    except (OSError, ValueError):
        why = {"exit": "not waited for (its parent ended first)"}
    try:
        with open(report_path + ".stacks") as handle:
            stacks = handle.read()[-8000:]
    except OSError:
        stacks = ""
    return {"ok": False, "error": f"no report: exit {why.get('exit')}, signal {why.get('signal')}"
            + (f"; the watchdog's stacks:\n{stacks}" if stacks else "")}


def run_prefix(prefix: tuple[str, ...], cached_family: bool, runner: Runner, model: Model) -> None:
    check(model, runner, "start")
    for event in prefix:
        runner.do(event)
        model.apply(event)
        check(model, runner, event)


def main(out_dir: str) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from fi_compat.model.release_detection import detect_release
    from fi_compat.model.specs import TUNING_CONFIG
    from fi_compat.workload import CpuHost

    import fi_compat  # noqa: F401  (imported once, before every fork)

    release = detect_release().version
    cached_family = TUNING_CONFIG.present_in(release)
    host = CpuHost()
    host.patch_torch()  # flashinfer is *not* imported in this process
    orders = all_orders()

    # 2. every distinct prefix, checked in a fork of its own
    prefixes = sorted({split(order)[0] for order in orders})
    for index, prefix in enumerate(prefixes):
        def body(prefix=prefix):
            model = Model(cached_family)
            run_prefix(prefix, cached_family, Runner(host), model)
            return {"ok": True, "prefix": list(prefix), "key": list(model.key())}

        path = os.path.join(out_dir, f"prefix-{index}.json")
        wait(in_fork(body, path), path)

    # 3-4. one real import per pre-import state; one fork per order under it
    classes: dict[tuple, list[int]] = {}
    for number, order in enumerate(orders):
        model = Model(cached_family)
        for event in split(order)[0]:
            model.apply(event)
        classes.setdefault(model.key(), []).append(number)
    for class_index, (key, numbers) in enumerate(classes.items()):
        representative = split(orders[numbers[0]])[0]

        def state_process(representative=representative, numbers=numbers, key=key):
            runner, model = Runner(host), Model(cached_family)
            run_prefix(representative, cached_family, runner, model)
            assert model.key() == key
            started = time.perf_counter()
            runner.import_flashinfer()  # the real import: the post-import hook fires here
            imported_s = time.perf_counter() - started
            work_done()  # each order below runs under a watchdog of its own
            for number in numbers:
                path = os.path.join(out_dir, f"order-{number}.json")
                wait(in_fork(lambda number=number: run_order(orders[number], runner, model, key), path), path)
            return {"ok": True, "key": list(key), "import_s": round(imported_s, 3)}

        path = os.path.join(out_dir, f"state-{class_index}.json")
        wait(in_fork(state_process, path), path)
    with open(os.path.join(out_dir, "meta.json"), "w") as handle:
        json.dump({"release": str(release), "cached_family": cached_family, "orders": [list(o) for o in orders],
                   "prefixes": [list(p) for p in prefixes], "prefix_count": len(prefixes), "states": len(classes)},
                  handle)
    return 0


def run_order(order: tuple[str, ...], runner: Runner, model: Model, key: tuple) -> dict:
    """In a fork of the state process: flashinfer was just imported from ``key``."""
    prefix, index = split(order)
    steps = []
    event = order[index]
    # the import already happened in the parent; the model catches up with it
    model.apply("import")
    if event == "workaround":
        runner.do("workaround")
        model.apply("workaround")
    check(model, runner, event)
    steps.append({"event": event, "state": model.phase})
    for event in order[index + 1:]:
        runner.do(event)
        model.apply(event)
        check(model, runner, event)
        steps.append({"event": event, "state": model.phase})
    check_final_identity(model, runner)
    return {"ok": True, "order": list(order), "prefix": list(prefix), "pre_import_state": list(key), "steps": steps}


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
