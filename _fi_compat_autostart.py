"""Imported at every interpreter start by ``fi_compat_autostart.pth``, which the
fi-compat wheel installs next to its packages (see ``build_autostart_pth.py``).

Does nothing unless ``FI_COMPAT_AUTO`` is set: then fi_compat installs with the
``FI_COMPAT_*`` settings (:func:`fi_compat.startup.autostart`).  For container
images that can set environment variables but not wrap the command.

Cost when unset: one environment lookup (docs/run.md has the measured import
time).  Failure behaviour: never stops start-up unless ``FI_COMPAT_STRICT``
is set (see :mod:`fi_compat.startup`); a fi_compat that cannot even be
imported is reported in one stderr line.
"""

import os

if os.environ.get("FI_COMPAT_AUTO", "").strip():
    try:
        from fi_compat.startup import autostart
    except Exception as exc:  # a broken install must not break every interpreter
        import sys

        sys.stderr.write(
            f"fi_compat WARNING: FI_COMPAT_AUTO is set but fi_compat cannot be imported: {type(exc).__name__}: {exc}\n"
        )
    else:
        autostart()
