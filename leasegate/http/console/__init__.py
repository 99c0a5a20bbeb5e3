"""The operator console at ``/console``: server-rendered pages for admin keys.

``routes`` holds the blueprint (``create_app`` registers it); ``sessions`` the
sign-ins, which ``http.auth`` also reads (the session cookie counts as the admin
key for reads of ``/v1``). This package imports neither, so ``auth`` can import
``sessions`` without a cycle.
"""
