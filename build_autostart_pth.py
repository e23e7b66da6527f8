"""Build step that ships ``fi_compat_autostart.pth`` in the fi-compat wheel.

A ``.pth`` file must sit at the top of site-packages, outside any package,
which setuptools' package data cannot express.  This ``build_py`` writes the
one-line file into the build directory next to the packages, so it goes into
the wheel and installers put it in site-packages, where ``site`` runs its
``import`` line at every interpreter start.  pyproject.toml selects it with
``[tool.setuptools] cmdclass``; MANIFEST.in carries this file into the sdist.
Editable installs do not get the .pth: setuptools' editable wheels install a
finder for the packages, not the files a build step writes (docs/run.md).

The line imports ``_fi_compat_autostart``, which does nothing unless
``FI_COMPAT_AUTO`` is set.
"""

import os

from setuptools.command.build_py import build_py

PTH_NAME = "fi_compat_autostart.pth"
PTH_TEXT = "import _fi_compat_autostart\n"


class BuildPyWithAutostartPth(build_py):
    """``build_py`` plus the top-level ``fi_compat_autostart.pth``."""

    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, PTH_NAME)
        self.mkpath(self.build_lib)
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(PTH_TEXT)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = list(super().get_outputs(include_bytecode))
        outputs.append(os.path.join(self.build_lib, PTH_NAME))
        return outputs
