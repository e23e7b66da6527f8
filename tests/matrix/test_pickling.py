"""A patched flashinfer function pickles by reference, like the plain
function it replaces: unpickling returns whatever the attribute is then."""

from __future__ import annotations

import pickle

import pytest

import fi_compat
from fi_compat.model.specs import DECODE, TUNING_CONFIG, TUNING_CONFIG_BUILDER

pytest.importorskip("torch")


@pytest.fixture
def core(fi_cpu_host):
    import flashinfer.mla._core as core

    return core


def patched_functions(core) -> list[str]:
    names = [spec.name for spec in (TUNING_CONFIG_BUILDER, TUNING_CONFIG)
             if getattr(getattr(core, spec.name, None), "_fi_compat_wrapper", False)]
    assert names, "install() patched nothing in flashinfer.mla._core"
    return names


def test_patched_functions_pickle_by_reference_and_follow_the_attribute(core):
    originals = {spec.name: getattr(core, spec.name, None) for spec in (TUNING_CONFIG_BUILDER, TUNING_CONFIG)}
    fi_compat.install()
    names = patched_functions(core)
    dumped = {}
    for name in names:
        proxy = getattr(core, name)
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(proxy, protocol)) is proxy
        dumped[name] = pickle.dumps(proxy)
        # by reference: the module and the name, not the cache or the closure
        assert name.encode() in dumped[name] and len(dumped[name]) < 200
    fi_compat.uninstall()
    for name in names:
        assert pickle.loads(dumped[name]) is originals[name] is getattr(core, name)


def test_transparent_proxy_pickles_as_the_function_it_stands_for(core):
    import flashinfer.mla

    fi_compat.install(transparent=True)
    proxy = getattr(flashinfer.mla, DECODE.name)
    assert proxy._fi_compat_wrapper
    # flashinfer.mla._core keeps the original (fi_compat's own calls go there)
    assert pickle.loads(pickle.dumps(proxy)) is getattr(core, DECODE.name)


def test_a_detached_proxy_refuses_like_a_replaced_plain_function(core):
    fi_compat.install()
    name = patched_functions(core)[0]
    proxy = getattr(core, name)
    setattr(core, name, lambda *args, **kwargs: None)  # neither the proxy nor its original is there now
    try:
        with pytest.raises(pickle.PicklingError, match="not the same object"):
            pickle.dumps(proxy)
    finally:
        setattr(core, name, proxy)
