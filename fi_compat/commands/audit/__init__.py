"""``fi-compat audit``: every unbounded cache in a flashinfer build (``scan``),
measured growth under a real decode loop (``live``), and the command (``cli``)."""
