"""Request models: what a body or query string may be (validation at the edge, and the
request schemas of ``/openapi.json``)."""
