"""What runs inside a forked child on one synthetic release (tests/helpers/drift.py):
the call API's engine call forms, observed where flashinfer receives them.

Not a test module: tests/matrix/test_drift_catalogue.py sends these
functions to a :class:`drift_runner.ForkServer` and asserts on what they
return.  Every observation of a call is one of

* ``{"raised": "TypeName: message", "entered": bool, "launched": int}``: it
  raised; ``entered`` says whether flashinfer's function was entered at all;
* ``{"ok": True, "violations": [...], "launch": [max_seq_len, bmm1, bmm2]}``:
  it returned; ``violations`` lists every value that did not reach the
  parameter of its name, every non-default value dropped, and every omitted
  parameter that got another value than the call API documents.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from typing import Any, Callable

from fi_compat.model.specs import DECODE, TUNING_CONFIG_BUILDER
from fi_compat.workload.builder import builder_arguments

from helpers.support import decode_inputs, entry_arguments, launch_scales

BMM1, BMM2 = 0.125, 0.5  # distinct from each other and from every default


def _flashinfer_function(core: Any, name: str) -> Any:
    function = getattr(core, name, None)
    return None if function is None else inspect.unwrap(function)


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) in (int, float, str, bool) and type(a) is type(b) and a == b)


def observe(call: Callable[[], Any], target: Any, spec: Any, given: dict, recorder: Any = None) -> dict:
    """Run ``call`` (which passes ``given``, by the newest signature's names)
    and report what ``target`` (flashinfer's function) received."""
    before = recorder.total if recorder is not None else 0
    if target is None:
        received: list = []
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            return {"raised": f"{type(exc).__name__}: {exc}", "entered": False, "launched": 0}
        return {"ok": True, "violations": ["returned although flashinfer has no such function"], "launch": None}
    with entry_arguments(target) as received:
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            launched = (recorder.total - before) if recorder is not None else 0
            return {"raised": f"{type(exc).__name__}: {exc}", "entered": bool(received), "launched": launched}
    violations = []
    if len(received) != 1:
        return {"ok": True, "violations": [f"flashinfer's function entered {len(received)} times"], "launch": None}
    got = received[0]
    defaults = spec.defaults()
    for name in spec.names:
        if name in given:
            if name in got:
                if not _same(got[name], given[name]):
                    violations.append(f"{name}: sent {given[name]!r}, received {got[name]!r}")
            elif not _same(given[name], defaults.get(name)):
                violations.append(f"{name}: sent {given[name]!r}, dropped silently")
        elif name in got and name in defaults and not _same(got[name], defaults[name]):
            violations.append(f"{name}: omitted, received {got[name]!r} instead of the documented {defaults[name]!r}")
    launch = None
    if recorder is not None:
        if recorder.total - before != 1:
            violations.append(f"{recorder.total - before} launches")
        else:
            launch = list(launch_scales(recorder.launches[-1]))
    return {"ok": True, "violations": violations, "launch": launch}


# --------------------------------------------------------------------------- decode call forms


def _decode_forms(torch: Any, accepts_counter: bool) -> dict[str, tuple[Callable, dict]]:
    """name -> (call(function, max_seq_len), the arguments by name): TensorRT-LLM's
    16 positional arguments, vLLM's and SGLang's keyword calls, a mixed call."""
    t = decode_inputs(torch, page_size=32, width=64)
    shared_tables = t["block_tables"][:, 0]
    counter = {"multi_ctas_kv_counter_buffer": torch.zeros(1 << 14, dtype=torch.int32)} if accepts_counter else {}
    head = (t["query"], t["kv_cache"], t["workspace_buffer"], 128, 512, 64)

    def trtllm(f, n):
        return f(*head, t["block_tables"], t["seq_lens"], n, 0, t["out"], BMM1, BMM2, None, None, False,
                 backend="trtllm-gen", is_var_seq=True, uses_shared_paged_kv_idx=False, **counter)

    def vllm(f, n):
        return f(query=t["query"], kv_cache=t["kv_cache"], workspace_buffer=t["workspace_buffer"], qk_nope_head_dim=128,
                 kv_lora_rank=512, qk_rope_head_dim=64, block_tables=shared_tables, seq_lens=t["seq_lens"],
                 max_seq_len=n, bmm1_scale=BMM1, bmm2_scale=BMM2, return_lse=False, **counter)

    def sglang(f, n):
        return f(query=t["query"], kv_cache=t["kv_cache"], enable_pdl=False, workspace_buffer=t["workspace_buffer"],
                 qk_nope_head_dim=128, kv_lora_rank=512, qk_rope_head_dim=64, block_tables=shared_tables,
                 seq_lens=t["seq_lens"], max_seq_len=n, bmm1_scale=BMM1, return_lse=False,
                 skip_softmax_threshold_scale_factor=None, **counter)

    def mixed(f, n):
        return f(*head, t["block_tables"], t["seq_lens"], n, bmm2_scale=BMM2, bmm1_scale=BMM1,
                 uses_shared_paged_kv_idx=False, backend="trtllm-gen", **counter)

    forms = {}
    for name, call in (("trtllm-16-positional", trtllm), ("vllm-keywords", vllm), ("sglang-keywords", sglang),
                       ("mixed", mixed)):
        given: dict = {}

        def spy(*args, __given=given, **kwargs):
            __given.update(zip(DECODE.names, args))
            __given.update(kwargs)

        call(spy, 0)  # what the form passes, by name
        forms[name] = (call, given)
    return forms


def _decode_round(fi_compat: Any, core: Any, host: Any, torch: Any, start: int) -> dict:
    target = _flashinfer_function(core, DECODE.name)
    accepts_counter = "multi_ctas_kv_counter_buffer" in inspect.signature(target).parameters
    results = {}
    for index, (name, (call, given)) in enumerate(_decode_forms(torch, accepts_counter).items()):
        length = start + index
        given = {**given, "max_seq_len": length}
        outcome = observe(lambda call=call, length=length: call(fi_compat.mla_decode, length),
                          target, DECODE, given, host.recorder)
        if outcome.get("ok") and outcome["launch"] is not None:
            expected = [length, given.get("bmm1_scale", 1.0), given.get("bmm2_scale", 1.0)]
            if outcome["launch"] != expected:
                outcome["violations"].append(f"launch (max_seq_len, bmm1, bmm2) {outcome['launch']} != {expected}")
        results[name] = outcome
    return results


# --------------------------------------------------------------------------- builder call forms


def _builder_round(fi_compat: Any, core: Any, torch: Any, start: int) -> dict:
    from helpers.drift import RENAMED_BUILDER

    target = _flashinfer_function(core, TUNING_CONFIG_BUILDER.name) or _flashinfer_function(core, RENAMED_BUILDER)
    results = {}
    for index, form in enumerate(("keywords", "positional-9", "positional-15", "mixed")):
        values = builder_arguments(
            runner_names=("trtllm-gen",), max_seq_len=1000 + start + index,
            has_sparse_mla_top_k_lens=False, cute_dsl_impl="auto", sinks=None, enable_dcp=False, cp_world=1, cp_rank=0,
        )
        names = TUNING_CONFIG_BUILDER.names
        if form == "keywords":
            given = {n: values[n] for n in names[:9]}
            call = lambda g=given: fi_compat.build_mla_decode_tuning_config(**g)  # noqa: E731
        elif form == "positional-9":
            given = {n: values[n] for n in names[:9]}
            call = lambda g=given: fi_compat.build_mla_decode_tuning_config(*g.values())  # noqa: E731
        elif form == "positional-15":
            given = {n: values[n] for n in names}
            call = lambda g=given: fi_compat.build_mla_decode_tuning_config(*g.values())  # noqa: E731
        else:
            given = {n: values[n] for n in names[:9]}
            given["cute_dsl_impl"] = "auto"
            call = lambda g=given: fi_compat.build_mla_decode_tuning_config(  # noqa: E731
                *list(g.values())[:7], max_seq_len=g["max_seq_len"], device=g["device"], cute_dsl_impl="auto")
        results[form] = observe(call, target, TUNING_CONFIG_BUILDER, given)
    return results


def _transparent_round(fi_compat: Any, core: Any, host: Any, torch: Any) -> dict:
    """Transparent mode, where the installer accepts the release: a caller of
    the patched ``flashinfer.mla`` attribute writes TensorRT-LLM's call for
    the *installed* signature (positional in its order, keywords after)."""
    import flashinfer.mla

    from fi_compat.calls import transparent

    fi_compat.install(transparent=True)
    state = fi_compat.status()["state"]
    patched = getattr(flashinfer.mla, DECODE.name)
    routed = transparent.unwrap(patched) is not patched
    if state != "installed" or not routed:  # refused: the call API cannot bind this release's function
        fi_compat.uninstall()
        return {"state": state, "routed": routed}
    t = decode_inputs(torch, page_size=32, width=64)
    values = dict(query=t["query"], kv_cache=t["kv_cache"], workspace_buffer=t["workspace_buffer"], qk_nope_head_dim=128,
                  kv_lora_rank=512, qk_rope_head_dim=64, block_tables=t["block_tables"], seq_lens=t["seq_lens"],
                  max_seq_len=600, sparse_mla_top_k=0, out=t["out"], bmm1_scale=BMM1, bmm2_scale=BMM2, sinks=None,
                  skip_softmax_threshold_scale_factor=None, enable_pdl=False, backend="trtllm-gen", is_var_seq=True,
                  uses_shared_paged_kv_idx=False)
    target = _flashinfer_function(core, DECODE.name)
    installed = inspect.signature(target).parameters
    positional = []
    for name, parameter in installed.items():
        if name not in values or parameter.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or len(positional) >= 16:
            break
        positional.append(name)
    keywords = {n: values[n] for n in values if n in installed and n not in positional}
    given = {n: values[n] for n in [*positional, *keywords]}
    outcome = observe(lambda: patched(*[values[n] for n in positional], **keywords), target, DECODE, given,
                      host.recorder)
    fi_compat.uninstall()
    return {"state": state, "routed": routed, "positional": positional, "outcome": outcome}


# --------------------------------------------------------------------------- entry points (run in the child)


def check_release(strict_refusal: bool = True) -> dict:
    """Import the release under the CPU shim and run every form in three
    states: the call API's implicit install, after ``uninstall()``, and (when
    the release is refused) after a refused ``install(strict=True)``."""
    import torch

    import fi_compat
    from fi_compat.workload import cpu_host

    with warnings.catch_warnings(record=True) as caught, cpu_host() as host:
        warnings.simplefilter("always")
        import flashinfer
        import flashinfer.mla._core as core

        report: dict = {"version": flashinfer.__version__, "decode": {}, "builder": {}}
        report["decode"]["implicit"] = _decode_round(fi_compat, core, host, torch, 300)
        implicit = fi_compat.status()
        report["state_implicit"] = implicit["state"]
        report["verdicts_implicit"] = {row["name"]: row["verdict"] for row in implicit["bounds"]}
        report["builder"]["implicit"] = {
            form: {k: v for k, v in outcome.items() if k != "violations"} if "raised" in outcome else {"ok": True}
            for form, outcome in _builder_round(fi_compat, core, torch, 0).items()
        }
        fi_compat.uninstall()
        report["decode"]["uninstalled"] = _decode_round(fi_compat, core, host, torch, 400)
        report["builder"]["uninstalled"] = _builder_round(fi_compat, core, torch, 100)
        report["state_uninstalled"] = fi_compat.status()["state"]
        if strict_refusal:
            try:
                fi_compat.install(strict=True)
                report["strict_install"] = "installed"
                fi_compat.uninstall()
            except fi_compat.FiCompatError as exc:
                report["strict_install"] = f"{type(exc).__name__}: {exc}"
                report["decode"]["refused"] = _decode_round(fi_compat, core, host, torch, 500)
                report["state_refused"] = fi_compat.status()["state"]
        report["transparent"] = _transparent_round(fi_compat, core, host, torch)
    report["warnings"] = [
        {"category": w.category.__name__, "filename": w.filename, "lineno": w.lineno, "message": str(w.message)}
        for w in caught if issubclass(w.category, fi_compat.FiCompatWarning)
    ]
    report["checks_file"] = __file__
    return report


def install_warnings() -> dict:
    """``install()`` before ``import flashinfer`` (the post-import hook
    refuses the release), then ``install()`` again after it: where each
    warning points."""
    import fi_compat
    from fi_compat.installing import installer
    from fi_compat.workload import cpu_host

    found = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fi_compat.install()
        import_line = sys._getframe().f_lineno + 1
        with cpu_host():  # imports flashinfer on entry: the hook runs here
            import flashinfer.mla  # noqa: F401
        found["hook"] = [(w.category.__name__, w.filename, w.lineno) for w in caught
                         if issubclass(w.category, fi_compat.FiCompatWarning)]
        hooked = fi_compat.status()
        found["hook_state"] = hooked["state"]
        found["hook_verdicts"] = {row["name"]: row["verdict"] for row in hooked["bounds"]}
        del caught[:]
        installer.reset()  # a fresh process: the same causes warn again (once per cause per process)
        install_line = sys._getframe().f_lineno + 1
        fi_compat.install()
        found["install"] = [(w.category.__name__, w.filename, w.lineno) for w in caught
                            if issubclass(w.category, fi_compat.FiCompatWarning)]
    found.update(file=__file__, import_line=import_line, install_line=install_line)
    return found
