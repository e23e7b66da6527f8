"""The suite's shared helpers, imported as a package (``from helpers import support``): tests/ is
on ``sys.path`` (pyproject's ``pythonpath``, and ``PYTHONPATH`` for the children the tests start).
Nothing here is collected as tests."""
