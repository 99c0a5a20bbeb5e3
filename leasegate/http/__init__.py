"""The HTTP surface: routes translate requests into actor messages (``routes/``), over
the server's plumbing (``server/``), request models (``models/``), the API's document
(``openapi/``), ``/metrics`` (``metrics/``) and the operator's console (``console/``)."""
