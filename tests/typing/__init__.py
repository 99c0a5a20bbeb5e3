"""Lines mypy must refuse: read by mypy in ``make test``, never run (see seam.py)."""
