"""The pin-bump guard: check a flashinfer-python bump before it merges.

``fi-compat guard [FILE ...] [--pin flashinfer-python==X ...] [--wheel PATH ...]``
reads requirement, pyproject and lock files (:mod:`.pins`), turns each flashinfer-python
requirement into releases (:mod:`.index`), gets each release's wheel
(:mod:`.fetch`), reads the decode module's source from the wheel in memory
(:mod:`.wheel`) and asks the runtime's own :func:`fi_compat.verdict.judgement.judge_release`
what fi_compat would do with it (:mod:`.check`).  :mod:`.report` prints the table or JSON; :mod:`.cli` wires
it together.  Nothing here imports torch or flashinfer, and the static check
executes no flashinfer code: signatures come from :mod:`ast`.

``--census`` runs the release, in a child process only: :mod:`.census_env`
installs the wheel into a throwaway directory, :mod:`.census_probe` soaks each
engine layout there under the CPU-host shim with fi_compat installed, and
:mod:`.census_check` judges whether a flashinfer cache grows per distinct length.
"""

from __future__ import annotations

from ...model.specs import DISTRIBUTION as DISTRIBUTION  # defined once, in the spec
