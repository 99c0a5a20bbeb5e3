"""The SDK, written once: ``_async/`` is the source, ``_sync/`` generated from it.

``scripts/sync_sdk.py`` writes each module of ``leasegate/client/_sync/`` from
its namesake in ``_async/`` (all but ``backend.py``, written by hand on each
side): ``await`` and ``async`` go, ``AsyncWorker`` becomes ``Worker``,
``AsyncClientBase`` ``ClientBase``, and the backend's tasks become threads.
``make test`` fails when ``_sync/`` is not what it writes.
"""
