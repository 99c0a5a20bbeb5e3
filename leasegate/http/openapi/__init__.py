"""``/openapi.json`` and ``/docs``: the API's document and the page that shows it."""
