"""Write docs/errors.md from the bad-input catalogue (tests/helpers/errors_catalogue.py).

    python scripts/generate_errors_doc.py            # rewrite docs/errors.md
    python scripts/generate_errors_doc.py --check    # exit 1 if it is out of date

Runs every row (fake flashinfer modules, nothing real is imported) and
records the exception or warning and the message a user sees.
tests/test_errors_catalogue.py fails when the file differs from this output.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "errors.md")

HEADER = """\
# Errors and warnings

Every error and warning a user can get from fi_compat's public entry points
(`install()`, the `FI_COMPAT_*` environment variables, `mla_decode()`,
`build_mla_decode_tuning_config()`, `apply_max_seq_len_policy()`) and the
`fi-compat` command line (`guard`, `doctor`, `audit`, `soak`), with the exact
message.  `fi-compat guard` prints its per-file errors in its report table
(or `--json` "reason") and exits 2; file names appear as given.  Each message names what
was given and what is accepted, or what was found and what to do next.

This file is generated: `python scripts/generate_errors_doc.py` (from the
repository root) runs every row of `tests/helpers/errors_catalogue.py` and writes it;
`tests/test_errors_catalogue.py` fails when it is out of date.  Rows that
involve flashinfer run against a fake release (tests/helpers/fakes.py) of the
release shown, so the messages do not depend on the installed release.

All errors derive from `fi_compat.FiCompatError` (typed errors) or are the
built-in `ValueError` / `TypeError` / `ImportError` for invalid arguments;
all warnings derive from `fi_compat.FiCompatWarning`.  Invalid settings raise
before anything is patched.

## Warnings or logging

Each event goes to one channel, never both:

| event | channel | why |
|---|---|---|
| a cache left unbounded (`UnsupportedReleaseWarning`), a release outside the verified ones (`UnverifiedReleaseWarning`), transparent mode left out, a changed default (`DefaultMismatchWarning`), `install(maxsize=...)` (`DeprecationWarning`) | `warnings` | what the program asked for is not quite what it gets: the warning points at the program's own `install()`, `import` or call line, `-W error` or a filter can turn it into an error, and `pytest.warns` sees it |
| the install summary, a row bounded although flashinfer bounds it itself, the runtime watch starting where knowledge is missing (and why) or retiring | logging, INFO | state, not a request to act |
| a strict failure (the import raises it), an install failure kept for the next call, an `uninstall()` that leaves a pass-through behind someone else's replacement, an invalid `FI_COMPAT_*` value at start-up, flashinfer's version metadata disagreeing with its code | logging, WARNING or ERROR | no call of the program's to attach a warning to, or an exception says it already |

A warning is said once per cause per process, at most 200 characters
(`fi_compat.errors.WARNING_LIMIT`): the same unverified release is one
`UnverifiedReleaseWarning`, however many cute-dsl modules are imported lazily
later (vLLM's path used to raise it four times); a cache left unbounded is one
per release and function, whatever re-installs follow.  The details (expected
and found parameters, every row, where a moved function was found) are in
`fi-compat doctor` and `fi_compat.status()` (`notes`, each row's `reason`).
`fi_compat.installing.installer.reset()` (a fresh process, for test suites) warns again.  A program
that keeps only its logs routes warnings there with
`logging.captureWarnings(True)` (logger `py.warnings`).

## Where fi_compat is stricter than flashinfer

`max_seq_len=0` (and any value below 1) is refused by `mla_decode()` on every
backend.  flashinfer itself is inconsistent there: with an explicit
`backend="trtllm-gen"` its host code passes 0 to the kernel, but its `auto`
backend (vLLM's and SGLang's default) and `cute-dsl` raise `ValueError:
max_seq_len must be > 0` (0.6.18; 0.7.4's MLA planner checks it too).  The
value must be at least the batch's largest `seq_lens`, which in decode counts
the token being decoded, so 0 describes no real decode batch.  Accepting it
only where trtllm-gen would run would make a call site switched to
`mla_decode()` pass or fail with the backend flashinfer picks; fi_compat takes
the range every backend accepts (1 to 2**31-1, the kernels' 32-bit int).
`tests/test_max_seq_len_range.py` checks both halves on the real wheel.

## After a strict refusal

When `install(strict=True)` (or `FI_COMPAT_STRICT=1` with the install that
runs at `import flashinfer`) raises `SignatureMismatchError` or
`UnsupportedReleaseError`, nothing is installed, and a program that catches
the error does not get unbounded decoding by accident: every decode through
fi_compat -- `mla_decode()`, `build_mla_decode_tuning_config()` and
transparent mode's entry -- raises that same typed error, on every call, until
the program chooses otherwise.  A program that wants to go on with
flashinfer's unbounded caches says so: `fi_compat.uninstall()` (the call API
then calls flashinfer unpatched and never installs on its own), or
`fi_compat.install(strict=False)` (bounds every cache whose signature matches,
leaves the rest unbounded with one `UnsupportedReleaseWarning`).  A process
that installed at start-up (`fi-compat run --strict`, `FI_COMPAT_AUTO=1
FI_COMPAT_STRICT=1`) ends at its first MLA decode instead (fi_compat.installing.tripwire).
`tests/matrix/test_strict_refusal.py` checks both orders on a real wheel
edited in the test.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render() -> str:
    for path in (os.path.join(ROOT, "tests"), ROOT):  # this checkout's fi_compat, not an installed one
        if path not in sys.path:
            sys.path.insert(0, path)
    from helpers import errors_catalogue

    logging.getLogger("fi_compat").disabled = True  # the log line repeats the warning
    try:
        lines = [HEADER]
        sections: dict[str, list[str]] = {}  # entry point -> table rows, in order of first appearance
        for row in errors_catalogue.ROWS:
            outcome = errors_catalogue.run(row)
            if outcome.raises != row.raises or row.contains not in outcome.message:
                raise SystemExit(f"row {row.id}: got {outcome.raises}: {outcome.message!r}")
            message = outcome.message
            lines_of = message.splitlines()
            if len(lines_of) > 1:  # argparse: usage then the error; help: usage first; pip parse errors: caret lines
                if "error:" in lines_of[-1]:
                    message = lines_of[-1]
                elif lines_of[0].startswith("usage:"):
                    message = lines_of[0] + " … (the full help follows)"
                else:
                    message = lines_of[0] + " (then the line, with a caret under the problem)"
            release = f" (flashinfer {row.release})" if row.importable and row.release != "0.6.18" else ""
            sections.setdefault(row.entry, []).append(
                f"| {_cell(row.given)}{release} | `{row.raises}` | {_cell(message)} |")
        for entry, rows in sections.items():
            lines += ["", f"## `{entry}`", "", "| given | raises | message |", "|---|---|---|", *rows]
        return "\n".join(lines) + "\n"
    finally:
        logging.getLogger("fi_compat").disabled = False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/errors.md is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        with open(DOC, encoding="utf-8") as handle:
            return 0 if handle.read() == text else 1
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    with open(DOC, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
