"""The child of test_engine_replays.py's ``fi-compat run`` test.

Run as ``fi-compat run --cache-size N -- python replay_child.py OUT_DIR BATCHES``
(with tests/ and tests/matrix on ``PYTHONPATH``).  fi_compat was installed by the
start-up hook; this process only imports flashinfer under the CPU-host shim, as
an engine's worker would import it, and then:

1. replays SGLang's batches (``flashinfer.decode``'s function looked up per call,
   backend omitted) and vLLM's (a name bound by ``from flashinfer.decode
   import ...`` after start-up, backend omitted), ``BATCHES`` each, traced;
2. uninstalls fi_compat and replays the same batches through flashinfer alone.

It writes OUT_DIR/replays.json; the test asserts on it.  fi_compat's INFO lines
go to stderr (``logging`` configured before flashinfer is imported).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any


def main() -> None:
    out_dir, batches = sys.argv[1], int(sys.argv[2])
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s", stream=sys.stderr)
    import fi_compat

    state_at_start = fi_compat.status()["state"]

    from fi_compat.counting import census
    from fi_compat.workload import cpu_host

    import engine_replay as er

    def over_bound(before: dict, after: dict) -> list[str]:
        return [g.describe() for g in census.over_bound(after, before, er.CACHE_SIZE)]

    with cpu_host() as host:
        import torch
        import flashinfer.decode  # noqa: F401  (the import installs fi_compat)

        status = fi_compat.status()
        vllm_module = er.bind_early("replay_vllm_flashinfer_mla")
        engines: dict[str, Any] = {
            "sglang": (er.sglang_steps(batches, seed=19), lambda index: er.public_decode()),
            "vllm": (er.vllm_steps(batches, seed=19), lambda index: er.held_decode(vllm_module)),
        }
        replayers = {name: er.driver(torch, name, None, steps) for name, (steps, _) in engines.items()}
        replayed, report = {}, {}
        for name, (steps, decode_for) in engines.items():
            before = census.take()
            replayed[name] = er.run(replayers[name], steps, decode_for, host.recorder, traced=True)
            report[name] = {"growth": replayed[name].growth, "grew_past_bound": over_bound(before, census.take())}
        fi_compat.uninstall()
        for name in replayed:
            steps, decode_for = engines[name]
            before = census.take()
            alone = er.run(replayers[name], steps, decode_for, host.recorder, traced=False)
            report[name].update(alone_grew_past_bound=over_bound(before, census.take()),
                                not_one_launch=[replayed[name].not_one_launch, alone.not_one_launch],
                                differences=er.differences(steps, replayed[name], alone))
    facts = {"pid": os.getpid(), "state_at_start": state_at_start, "state": status["state"],
             "cache_size": status["settings"]["cache_size"]["value"], "engines": report}
    with open(os.path.join(out_dir, "replays.json"), "w", encoding="utf-8") as handle:
        json.dump(facts, handle)


if __name__ == "__main__":
    main()
