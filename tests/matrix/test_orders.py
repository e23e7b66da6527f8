"""Issue 8, in the style of dd-trace-py's patch tests: every order of
{import flashinfer, install, uninstall, second install, TensorRT-LLM-style
workaround present} from ``itertools.permutations``, each verified after every
step (state, patched attributes, the bound in force, that the builder and a
decode launch still work) and after a final ``uninstall()`` (every flashinfer
attribute is the original object again; TensorRT-LLM's memo, if present,
stays, with fi_compat's proxy inside it turned into a pass-through).

"import flashinfer" after install needs a process where flashinfer was never
imported: ``orders_driver.py`` (its docstring explains the fork tree) runs all
120 orders in about four flashinfer imports instead of 120.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
if importlib.util.find_spec("flashinfer") is None:  # find, not import: it needs the shim
    pytest.skip("needs flashinfer-python", allow_module_level=True)

import orders_driver  # noqa: E402  (tests/matrix is on sys.path: pytest's rootdir-relative import)

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "orders_driver.py")
ORDERS = orders_driver.all_orders()


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("orders")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore::DeprecationWarning",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), HERE, *sys.path])}
    for variable in [v for v in env if v.startswith("FI_COMPAT_")]:
        del env[variable]  # the orders set their own settings
    done = subprocess.run([sys.executable, DRIVER, str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    meta = json.loads((out / "meta.json").read_text())
    prefixes = {}
    for index in range(meta["prefix_count"]):
        report = orders_driver.outcome(str(out / f"prefix-{index}.json"))
        assert report["ok"], report["error"]
        prefixes[tuple(report["prefix"])] = report
    orders = {order: orders_driver.outcome(str(out / f"order-{number}.json")) for number, order in enumerate(ORDERS)}
    for index in range(meta["states"]):
        report = orders_driver.outcome(str(out / f"state-{index}.json"))
        assert report["ok"], report.get("error")
    return meta, prefixes, orders


def test_driver_covers_every_order_with_a_few_imports(results):
    meta, prefixes, orders = results
    assert len(ORDERS) == 120 and len(set(ORDERS)) == 120
    assert [tuple(o) for o in meta["orders"]] == ORDERS
    assert len(prefixes) == 16 and meta["states"] == 4


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_order(order, results):
    _, prefixes, orders = results
    prefix, _ = orders_driver.split(order)
    assert prefixes[prefix]["ok"]  # each step before the import, checked in its own process
    report = orders[order]
    assert report["ok"], report.get("error")
    assert [s["event"] for s in report["steps"]] == list(order[len(prefix):])
    assert report["pre_import_state"] == prefixes[prefix]["key"]


def test_a_child_without_a_report_says_why(tmp_path, monkeypatch):
    """A child that hangs is ended by its own watchdog with every thread's
    stack, and one killed by a signal says which: "no report" always carries
    its cause (the GPU run's 14 bare "no report" rows lost it)."""
    monkeypatch.setattr(orders_driver, "TIMEOUT_S", 1)

    def hangs():
        import time

        time.sleep(3600)

    path = str(tmp_path / "hung.json")
    orders_driver.wait(orders_driver.in_fork(hangs, path), path)
    report = orders_driver.outcome(path)
    assert report["ok"] is False
    assert report["error"].startswith("no report: exit 1, signal None")
    assert "time.sleep" in report["error"] or "in hangs" in report["error"]

    def killed():
        import os
        import signal

        os.kill(os.getpid(), signal.SIGKILL)

    path = str(tmp_path / "killed.json")
    orders_driver.wait(orders_driver.in_fork(killed, path), path)
    assert orders_driver.outcome(path)["error"].startswith("no report: exit None, signal SIGKILL")
