"""The console's blueprint, its guard (session cookie, CSRF), sign-in and sign-out,
and what every page shares.

The app's own authentication lets ``/console`` through (it takes no bearer key);
:func:`guard` stands in for it: a page without a live session redirects to the
sign-in form, a POST whose ``csrf`` field does not match the session's token is
refused (403 page) before the form is acted on.
"""

from __future__ import annotations

import re
import secrets
from importlib.resources import files
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import trio
from quart import Blueprint, Response, current_app, g, redirect, render_template, request, url_for
from werkzeug.wrappers import Response as Redirect

from leasegate.actors.keys.views import Principal
from leasegate.errors import InvalidRequest, LeasegateError, NotFound, Unauthorized
from leasegate.http.console.sessions import COOKIE, Session
from leasegate.http.server.auth import Authenticator

bp = Blueprint("console", __name__, url_prefix="/console", template_folder="templates")

OPEN_ENDPOINTS = {"console.sign_in_form", "console.sign_in", "console.static"}
# name -> content type: the console's files (package data), nothing else.
STATIC = {"console.css": "text/css; charset=utf-8",
          "console.js": "text/javascript; charset=utf-8",
          "theme.js": "text/javascript; charset=utf-8"}
_static_cache: dict[str, bytes] = {}
# Same origin only; no inline script or style (nothing to inject into).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def authenticator() -> Authenticator:
    found: Authenticator = current_app.extensions["leasegate.auth"]
    return found


def session() -> Session:
    found: Session = g.console_session
    return found


def principal() -> Principal:
    found: Principal = g.principal
    return found


# Sent by the page's script when it re-reads a page to refresh its live parts: the
# notices wait for the next page the operator opens.
REFRESH_HEADER = "X-Console-Refresh"


async def page(template: str, http_status: int = 200, **context: Any) -> Response:
    """A page of the signed-in console: its notices (shown once, not to a refresh),
    the CSRF token for its forms."""
    current = g.get("console_session")
    shows_notices = current is not None and REFRESH_HEADER not in request.headers
    html = await render_template(
        template, notices=current.take_notices() if shows_notices else [],
        refused=current.take_refused() if shows_notices else None,
        csrf=current.csrf if current else "", who=g.get("principal"),
        **context)
    return Response(html, status=http_status, content_type="text/html; charset=utf-8")


def back_to(form: Any, fallback: str) -> Redirect:
    """A redirect to where a form returns: its ``back`` field when that is a console
    path, else ``fallback`` (never another site)."""
    return redirect(_console_path(form.get("back")) or fallback, 303)


# Where a form or sign-in may send the browser: the console's own paths, written in
# printable ASCII (no control character may reach a Location header), without "//"
# or a dot segment (browsers resolve "/console/../x" and "%2e%2e" to elsewhere).
_CONSOLE_PATH = re.compile(r"/console(?:/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*")
_QUERY = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@%/?-]*")
_MAX_CONSOLE_PATH = 2048
_PATH_SAFE = "/._~!$&'()*+,;=:@-"  # what quote() leaves of a path (the rest: %XX)


def _console_path(target: str | None) -> str | None:
    """``target`` if it is a safe same-site console path, else None (use the default)."""
    if not target or len(target) > _MAX_CONSOLE_PATH or "//" in target:
        return None
    path, _, query = target.partition("?")
    if not (_CONSOLE_PATH.fullmatch(path) and _QUERY.fullmatch(query)):
        return None
    if any(segment.lower().replace("%2e", ".") in (".", "..") for segment in path.split("/")):
        return None
    return target


@bp.before_request
async def guard() -> Response | Redirect | None:
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    auth = authenticator()
    session_id = request.cookies.get(COOKIE, "")
    found = auth.sessions.find(session_id) if session_id else None
    if found is None:
        auth.charge_address()  # answered without a key: the address pays
        return await _signed_out("sign in with an admin key")
    try:
        g.principal = await auth.session_principal(session_id)
    except Unauthorized as exc:
        return await _signed_out(exc.message)
    g.console_session = found
    if request.method == "POST":
        form = await request.form
        given = form.get("csrf", "").encode()
        if not secrets.compare_digest(given, found.csrf.encode()):
            return await page("error.html", 403, status=403, message=(
                "this form's CSRF token is missing or out of date; "
                "reload the page and try again"))
    return None


async def _signed_out(message: str) -> Response | Redirect:
    if request.method == "GET":
        # As the browser sent it (percent-encoded), so that it comes back whole.
        query = request.query_string.decode("latin-1")
        here = quote(request.path, safe=_PATH_SAFE) + ("?" + query if query else "")
        target = url_for("console.sign_in_form") + "?" + urlencode({"next": here})
        return redirect(target, 303)
    return await page("error.html", 401, status=401, message=message)


@bp.after_request
async def _headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.endpoint != "console.static":
        response.headers["Cache-Control"] = "no-store"
    return response


# A refused form's fields not shown again: the token, and the confirmation of a preview.
_NOT_KEPT = {"csrf", "confirm"}


@bp.errorhandler(LeasegateError)
async def _domain_error(exc: LeasegateError) -> Response | Redirect:
    """A refused form goes back (303) to the page it came from, where the page's script
    shows the error on that form with the values sent; a page's error is its page."""
    current = g.get("console_session")
    if request.method == "POST" and current is not None and exc.status < 500:
        form = await request.form
        current.refuse(request.path, {k: v for k, v in form.items(multi=True)
                                      if k not in _NOT_KEPT}, exc.message)
        current.notify("error", exc.message)
        return redirect(_console_path(form.get("back")) or _referrer()
                        or url_for("console.overview"), 303)
    response = await page("error.html", exc.status, status=exc.status, message=exc.message)
    for name, value in exc.headers.items():
        response.headers[name.replace("_", "-")] = value
    return response


def _referrer() -> str | None:
    """The console page a form was sent from (its Referer, when of this site)."""
    referrer = urlsplit(request.referrer or "")
    if referrer.netloc != request.host:
        return None
    return _console_path(referrer.path + ("?" + referrer.query if referrer.query else ""))


@bp.get("/static/<name>")
async def static(name: str) -> Response:
    if name not in STATIC:
        raise NotFound(f"no such file: {name}")
    if name not in _static_cache:  # read once, off the event loop
        source = files("leasegate.http.console").joinpath("static", name)
        _static_cache[name] = await trio.to_thread.run_sync(source.read_bytes)
    response = Response(_static_cache[name], content_type=STATIC[name])
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


@bp.get("/sign-in")
async def sign_in_form() -> Response:
    return await page("sign_in.html", next=_console_path(request.args.get("next")) or "")


@bp.post("/sign-in")
async def sign_in() -> Response | Redirect:
    """An admin key, checked as the bearer check does; a session in its place. A refusal
    shows the form again with the reason (200: a page, as a browser should show it)."""
    auth = authenticator()
    form = await request.form
    next_path = _console_path(form.get("next")) or url_for("console.overview")
    try:  # a refusal, a lookup too, costs the address: no guessing in bulk
        signing_in = await auth.verify(form.get("key", "").strip())
    except Unauthorized as refused:
        return await page("sign_in.html", next=next_path, error=refused.message)
    if signing_in.role != "admin":
        return await page("sign_in.html", next=next_path, error=(
            f"a {signing_in.role} key may not use the console: it needs an admin key"))
    session_id, _ = auth.sessions.begin(signing_in.key_id)
    response = redirect(next_path, 303)
    response.set_cookie(COOKIE, session_id, max_age=int(auth.sessions.lifetime), path="/",
                        httponly=True, samesite="Strict", secure=request.scheme == "https")
    return response


@bp.post("/sign-out")
async def sign_out() -> Redirect:
    authenticator().sessions.end(request.cookies.get(COOKIE, ""))
    response = redirect(url_for("console.sign_in_form"), 303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="Strict")
    return response


MAX_FIELD_CHARS = 2000


def form_field(form: Any, name: str, *, required: bool = True) -> str | None:
    """A console form's field, stripped (None when empty and not ``required``); a 400
    naming the field when it is missing or longer than ``MAX_FIELD_CHARS``."""
    value = str(form.get(name, "")).strip()
    if len(value) > MAX_FIELD_CHARS:
        raise InvalidRequest(f"{name} is over {MAX_FIELD_CHARS} characters")
    if not value:
        if required:
            raise InvalidRequest(f"{name} is required")
        return None
    return value
