"""`import fi_compat` must stay cheap: neither torch nor flashinfer."""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import fi_compat, fi_compat.cli, fi_compat.config, fi_compat.release_detection, fi_compat.errors
fi_compat.cli.build_parser()
fi_compat.detect_release()
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'flashinfer'))))
"""


def test_import_fi_compat_imports_neither_torch_nor_flashinfer():
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_install_before_flashinfer_import_stays_light():
    # install() with flashinfer not yet imported registers a post-import hook
    # and must not import it itself.
    code = "import sys, fi_compat; s = fi_compat.install(); print(s['state'], 'flashinfer' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["pending", "False", "False"]


@pytest.mark.parametrize("name", ["install", "uninstall", "status", "mla_decode", "build_mla_decode_tuning_config"])
def test_public_names_resolve(name):
    import fi_compat

    assert callable(getattr(fi_compat, name))
    assert name in dir(fi_compat)


def test_unknown_attribute_is_an_attribute_error():
    import fi_compat

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fi_compat.nope  # noqa: B018
