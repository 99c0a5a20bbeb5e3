"""``/docs``: Swagger UI over ``/openapi.json``, with every file it needs served by us.

quart-schema's own pages (``/docs``, ``/redocs``, ``/scalar``) load their scripts from
CDNs and are blank without a network; ``create_app`` turns them off and calls
:func:`install`. The Swagger UI files come from the installed ``flask-swagger-ui``
package (a plain copy of Swagger UI's release; Flask is already here as Quart's
base), and only the two the page uses are served, under ``/docs/static/``.
"""

from __future__ import annotations

from html import escape
from importlib.resources import files

import trio
from quart import Blueprint, Quart, Response, url_for
from quart_schema import hide

from leasegate.errors import NotFound

# name -> content type; nothing else under the package's dist folder is served.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
}
ENDPOINTS = {"docs.page", "docs.asset"}

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>{title}</title>
  <link rel="stylesheet" type="text/css" href="{css}">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{js}"></script>
  <script>
    window.ui = SwaggerUIBundle({{
      url: "{openapi}",
      dom_id: "#swagger-ui",
      deepLinking: true,
      layout: "BaseLayout",
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
      validatorUrl: null
    }});
  </script>
</body>
</html>
"""

bp = Blueprint("docs", __name__)
_cache: dict[str, bytes] = {}


@bp.get("/docs")
@hide
async def page() -> Response:
    """The reference page (no key needed). ``validatorUrl: null``: Swagger UI would
    otherwise send the document to an online validator."""
    html = PAGE.format(title="leasegate API",
                       css=escape(url_for("docs.asset", name="swagger-ui.css")),
                       js=escape(url_for("docs.asset", name="swagger-ui-bundle.js")),
                       openapi=escape(url_for("openapi")))
    return Response(html, content_type="text/html; charset=utf-8")


@bp.get("/docs/static/<name>")
@hide
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound(f"no such file: {name}")
    if name not in _cache:  # read once (about 1.9 MB for both), off the event loop
        source = files("flask_swagger_ui").joinpath("dist", name)
        _cache[name] = await trio.to_thread.run_sync(source.read_bytes)
    response = Response(_cache[name], content_type=ASSETS[name])
    response.headers["Cache-Control"] = "public, max-age=86400"
    return response


def install(app: Quart) -> None:
    app.register_blueprint(bp)
