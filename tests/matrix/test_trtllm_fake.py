"""The TensorRT-LLM fake (``tests/helpers/trtllm_fake.py``) holds to the facts of the real workaround.

Each test checks one fact read in TensorRT-LLM's source (05412d19 / 9eabd2df) or
measured by running it against the real wheels; where the release decides,
the cause is checked on the installed real release too.
"""

from __future__ import annotations

import inspect
import logging
from types import SimpleNamespace

import pytest

from helpers import trtllm_fake
from helpers.support import installed_release
from fi_compat.workload.builder import builder_arguments

torch = pytest.importorskip("torch")

PAGE_SIZE = 64


@pytest.fixture
def core(fi_cpu_host):
    with trtllm_fake.builder_restored() as core:
        yield core


def nine_parameter_recorder(calls: list, result=None):
    """A builder with the nine parameter names that records how it was called."""

    def record(*args, **kwargs):
        calls.append((args, kwargs))
        return object() if result is None else result

    record.__signature__ = inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in trtllm_fake.BUILDER_PARAMETERS])
    return record


def meta_arguments(**changes):
    arguments = builder_arguments(pages=4096, page_size=PAGE_SIZE, tables=(8, 2, 2048), max_seq_len=4096)
    arguments.update(changes)
    return arguments


# ---------------------------------------------------------------------------- the fake holds to the facts


def test_workaround_installs_where_the_real_one_did(core, caplog):
    release = installed_release()
    with caplog.at_level(logging.DEBUG, logger=trtllm_fake.logger.name):
        trtllm_fake.import_tensorrt_llm()
    messages = [r.getMessage() for r in caplog.records if r.name == trtllm_fake.logger.name]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == trtllm_fake.logger.name)
    installed = trtllm_fake.workaround_of(core) is not None
    if release in trtllm_fake.INSTALLED_ON:
        assert installed and messages == [trtllm_fake.INSTALLED_MESSAGE]
    elif release < trtllm_fake.AUTOTUNER_PACKAGE_FROM:
        assert not installed and messages == [trtllm_fake.SKIPPED_MESSAGE]
        with pytest.raises(ImportError):
            import flashinfer.autotuner.autotuner  # noqa: F401  (the cause, on the real release)
    elif release < trtllm_fake.INITIALIZERS_UNTIL:
        assert not installed and messages == []  # silent: the builder's parameters changed
        assert tuple(inspect.signature(core._build_mla_decode_tuning_config).parameters) \
            != trtllm_fake.BUILDER_PARAMETERS
    else:
        assert not installed and messages == [trtllm_fake.SKIPPED_MESSAGE]
        from flashinfer.autotuner.autotuner import DynamicTensorSpec

        with pytest.raises(TypeError, match="tensor_initializers"):
            DynamicTensorSpec(input_idx=(0,), dim_idx=(0,), gen_tuning_buckets=(1,),
                              map_to_tuning_buckets=abs, tensor_initializers=[None])


def test_workaround_does_not_install_twice_or_on_another_signature(core):
    if installed_release() not in trtllm_fake.INSTALLED_ON:
        pytest.skip("the workaround's probe passes on 0.6.15 and 0.6.15.post1 only")
    trtllm_fake.import_tensorrt_llm()
    first = core._build_mla_decode_tuning_config
    trtllm_fake.import_tensorrt_llm()
    assert core._build_mla_decode_tuning_config is first  # the marker stops a second install

    def other_builder(kv_cache, block_tables, workspace_buffer, runner_names, q_len, num_heads, kv_lora_rank,
                      max_seq_len, device, cute_dsl_impl=None):
        raise AssertionError("never called")

    core._build_mla_decode_tuning_config = other_builder  # more parameters, as from 0.6.16: left alone
    trtllm_fake.import_tensorrt_llm()
    assert core._build_mla_decode_tuning_config is other_builder


def test_workaround_function_is_what_tensorrt_llm_installs():
    calls: list = []
    namespace = SimpleNamespace()
    original = nine_parameter_recorder(calls)
    trtllm_fake._memoize(namespace, original)
    memo = namespace._build_mla_decode_tuning_config
    assert getattr(memo, trtllm_fake.MARKER) is True
    assert not hasattr(memo, "__wrapped__") and memo.__name__ == "_cached_build" and memo.__doc__ is None
    parameters = list(inspect.signature(memo).parameters.values())
    assert tuple(p.name for p in parameters) == trtllm_fake.BUILDER_PARAMETERS
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
               for p in parameters)
    with pytest.raises(AttributeError, match="numel"):
        memo(**meta_arguments(workspace_buffer=None))
    assert calls == []


def test_workaround_key_reads_and_keyword_call():
    calls: list = []
    namespace = SimpleNamespace()
    trtllm_fake._memoize(namespace, nine_parameter_recorder(calls))
    memo = namespace._build_mla_decode_tuning_config
    base = meta_arguments()
    first = memo(*base.values())  # TensorRT-LLM's memo takes positional calls too
    (args, kwargs), = calls
    assert args == () and list(kwargs) == list(trtllm_fake.BUILDER_PARAMETERS)  # the miss passes keywords
    entries = trtllm_fake.memo_entries(memo)
    assert list(entries) == [(4096, PAGE_SIZE, 2048, 1 << 20, ("trtllm-gen",), 1, 128, 512, 4096,
                              torch.device("cpu"))]
    # Not read: the batch dimension, the head dimension, the workspace dtype (same bytes).
    same = [meta_arguments(block_tables=torch.empty(64, 2, 2048, dtype=torch.int32, device="meta")),
            meta_arguments(kv_cache=torch.empty(4096, PAGE_SIZE, 512, device="meta")),
            meta_arguments(workspace_buffer=torch.empty(1 << 18, dtype=torch.int32, device="meta"))]
    assert all(memo(**arguments) is first for arguments in same) and len(calls) == 1
    # Read: every element of the key.
    different = [
        meta_arguments(kv_cache=torch.empty(2048, PAGE_SIZE, 576, device="meta")),
        meta_arguments(kv_cache=torch.empty(4096, 32, 576, device="meta")),
        meta_arguments(block_tables=torch.empty(8, 2, 1024, dtype=torch.int32, device="meta")),
        meta_arguments(workspace_buffer=torch.empty(1 << 21, dtype=torch.uint8, device="meta")),
        meta_arguments(runner_names=["trtllm-gen", "cute-dsl"]), meta_arguments(q_len=2),
        meta_arguments(num_heads=64), meta_arguments(kv_lora_rank=256), meta_arguments(max_seq_len=4097),
        meta_arguments(device=torch.device("meta")),
    ]
    for arguments in different:
        memo(**arguments)
    assert len(calls) == 1 + len(different) and len(entries) == 1 + len(different)


def test_workaround_clears_the_whole_dict_at_256_on_a_miss():
    calls: list = []
    namespace = SimpleNamespace()
    trtllm_fake._memoize(namespace, nine_parameter_recorder(calls))
    memo = namespace._build_mla_decode_tuning_config
    for length in range(1, trtllm_fake.MAX_ENTRIES + 1):
        memo(**meta_arguments(max_seq_len=length))
    entries = trtllm_fake.memo_entries(memo)
    assert len(entries) == 256
    memo(**meta_arguments(max_seq_len=256))  # a hit at 256 entries clears nothing
    assert len(entries) == 256 and len(calls) == 256
    memo(**meta_arguments(max_seq_len=257))  # a miss at 256 empties the dict, then inserts
    assert len(entries) == 1 and len(calls) == 257
    memo(**meta_arguments(max_seq_len=1))
    assert len(calls) == 258  # what was there before the clear is built again
