"""Warnings point at the user's line: ``fi_compat.errors.warn`` skips
fi_compat's, wrapt's and the import machinery's frames.

The call API's own warning, raised through ``mla_decode`` on a synthetic
release built from the real wheel, is checked in
tests/matrix/test_drift_catalogue.py; here the helper itself (through real
wrapt proxies and a real wrapt post-import hook) and ``install()``'s warnings
(fake core module, pinned release)."""

from __future__ import annotations

import sys
import textwrap
import types
import warnings

import pytest
import wrapt

from fi_compat.lookup import import_hooks

from fi_compat.errors import FiCompatWarning, warn

from helpers import errors_catalogue

THIS_FILE = __file__.removesuffix("c")


def _internal_module(tmp_path, name: str) -> types.ModuleType:
    """A module that claims to be part of fi_compat (``__name__``), as the
    call API and the installer are, whose function warns through the helper."""
    path = tmp_path / f"{name.replace('.', '_')}.py"
    path.write_text(textwrap.dedent("""
        from fi_compat.errors import FiCompatWarning, warn

        def deep(message):
            return deeper(message)

        def deeper(message):
            warn(message, FiCompatWarning)

        def hook(module):
            deep("from the hook")

        def wrapper(wrapped, instance, args, kwargs):
            return wrapped(*args, **kwargs)
    """))
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


def test_helper_called_directly_points_at_the_caller():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn("direct", FiCompatWarning); line = sys._getframe().f_lineno  # noqa: E702
    assert [(w.filename, w.lineno) for w in caught] == [(THIS_FILE, line)]


def test_frames_of_fi_compat_and_wrapt_are_skipped(tmp_path):
    internal = _internal_module(tmp_path, "fi_compat._warning_probe")
    # a wrapt proxy whose wrapper is fi_compat code, as the installed proxies are
    proxied = wrapt.FunctionWrapper(internal.deep, internal.wrapper)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        proxied("through wrapt"); line = sys._getframe().f_lineno  # noqa: E702
    assert [(w.filename, w.lineno) for w in caught] == [(THIS_FILE, line)]


def test_warning_from_a_post_import_hook_points_at_the_import_line(tmp_path, monkeypatch):
    """What installing before ``import flashinfer`` does: fi_compat's
    post-import hook runs fi_compat inside the import machinery."""
    internal = _internal_module(tmp_path, "fi_compat._warning_probe_hook")
    package = "fi_compat_warning_probe_target"
    (tmp_path / f"{package}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, package, raising=False)
    import_hooks.on_import(package, internal.hook)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__(package); line = sys._getframe().f_lineno  # noqa: E702
    assert [(w.filename, w.lineno) for w in caught] == [(THIS_FILE, line)]


def _install_warning(row_id: str, call):
    row = next(r for r in errors_catalogue.ROWS if r.id == row_id)
    with errors_catalogue.sandbox(row):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = call()
    found = [(w.filename, w.lineno) for w in caught if issubclass(w.category, FiCompatWarning)]
    return found, line


def _install_here() -> int:
    import fi_compat

    fi_compat.install(); return sys._getframe().f_lineno  # noqa: E702


def _decode_here() -> int:
    import fi_compat

    fi_compat.mla_decode(*errors_catalogue.decode_args()); return sys._getframe().f_lineno  # noqa: E702


def test_call_api_default_difference_warning_points_at_the_mla_decode_call():
    found, line = _install_warning("decode-new-default", _decode_here)
    assert found == [(THIS_FILE, line)]


@pytest.mark.parametrize("row_id", ["default-drift", "unverified-release"])
def test_install_warnings_point_at_the_install_call(row_id):
    found, line = _install_warning(row_id, _install_here)
    assert found == [(THIS_FILE, line)]

