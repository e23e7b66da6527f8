"""fi_compat's start-up hook for ``fi-compat run``.

``fi-compat run`` puts this file's directory first on ``PYTHONPATH``, so every
Python interpreter of the command's process tree imports it at start-up
(``site`` imports the first ``sitecustomize`` on ``sys.path``; children and
spawned workers inherit the variable).  It:

1. runs the ``sitecustomize`` that would have been imported without it (the
   first one on the rest of ``sys.path``), as ``site`` would: under the name
   ``sitecustomize``, and a failure there is printed the way ``site`` prints
   it and does not stop start-up;
2. calls :func:`fi_compat.startup.install_at_startup`, which reads the
   ``FI_COMPAT_*`` settings and never stops start-up unless
   ``FI_COMPAT_STRICT`` is set.

The chained module runs first, so whatever it sets up (``sys.path`` entries,
environment, logging) is in place when fi_compat installs.

Cost: one ``sys.path`` scan for the other ``sitecustomize`` plus
fi_compat's start-up install (docs/run.md).
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TRUE = ("1", "true", "yes", "on")


def _is_here(entry):
    try:
        return os.path.realpath(os.path.abspath(entry or os.curdir)) == os.path.realpath(_HERE)
    except (OSError, ValueError):
        return False


def _run_chained_sitecustomize():
    this_module = sys.modules.get(__name__)
    rest = [entry for entry in sys.path if not _is_here(entry)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # The application sees the module it would have seen without fi_compat.
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # site.execsitecustomize's handling
        sys.modules["sitecustomize"] = this_module
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}\n")


def _import_startup():
    try:
        import fi_compat.startup as startup
    except ModuleNotFoundError as exc:
        if exc.name != "fi_compat":
            raise
        # fi_compat is importable where `fi-compat run` ran but not here (it
        # was found through that process's working directory, say): load the
        # package this file ships in, by location, without changing sys.path.
        package_dir = os.path.dirname(_HERE)
        spec = importlib.util.spec_from_file_location(
            "fi_compat", os.path.join(package_dir, "__init__.py"), submodule_search_locations=[package_dir]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules["fi_compat"] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            del sys.modules["fi_compat"]
            raise
        import fi_compat.startup as startup
    return startup


def _install():
    try:
        startup = _import_startup()
    except Exception as exc:  # fi_compat itself cannot be imported by this interpreter
        strict = os.environ.get("FI_COMPAT_STRICT", "").strip().lower() in _TRUE
        level = "ERROR" if strict else "WARNING"
        sys.stderr.write(
            f"fi_compat {level}: cannot import fi_compat in {sys.executable} (pid {os.getpid()}): "
            f"{type(exc).__name__}: {' '.join(str(exc).split())}\n"
        )
        sys.stderr.flush()
        if strict:
            os._exit(1)
        return
    startup.install_at_startup("fi-compat run")


_run_chained_sitecustomize()
_install()
