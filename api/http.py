"""JSON errors with a code and a message, and JSON bodies with ETags and conditional GETs."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.schemas import ErrorBody, ErrorResponse

# Live reads may change with every commit: the client revalidates (cheap, thanks to the ETag).
LIVE: Final = "no-cache"
# A committed window's selection never changes.
IMMUTABLE: Final = "public, max-age=31536000, immutable"
# A committed window's detail changes only when a weight-setting attempt for it is recorded later.
COMMITTED: Final = "public, max-age=60"

STATUS_CODES: Final = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    422: "invalid_parameter",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}
# Sent with every response; the dashboard and docs pages (at / and /docs, and as files under
# /static) add their own Content-Security-Policy.
SECURITY_HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
ERROR_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    404: {"model": ErrorResponse, "description": "unknown peer or window"},
    422: {"model": ErrorResponse, "description": "invalid parameter"},
    429: {"model": ErrorResponse, "description": "rate limited (see Retry-After)"},
}

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = ErrorResponse(error=ErrorBody(code=code, message=message)).model_dump_json()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def dump(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()


def json_response(request: Request, body: bytes, *, cache_control: str) -> Response:
    """`body` with a strong ETag of its bytes; 304 when the client already holds it."""
    etag = f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
    headers = {"ETag": etag, "Cache-Control": cache_control}
    if_none_match = request.headers.get("if-none-match")
    if if_none_match is not None:
        tags = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
        if etag in tags or "*" in tags:
            return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as {"error": {"code", "message"}}; bad input is never a 500."""

    async def on_api_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    async def on_http(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = STATUS_CODES.get(exc.status_code, "error")
        return error_response(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))

    async def on_validation(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, "invalid_parameter", _validation_message(exc))

    async def on_database(_: Request, exc: Exception) -> Response:
        if not isinstance(exc, OperationalError | InterfaceError | PoolTimeout):  # reached; the query failed
            log.error("database error: %s", exc)
            return error_response(500, "internal_error", "the request could not be answered")
        log.warning("database unavailable: %s", exc)
        return error_response(503, "database_unavailable", "the database cannot be reached")

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(OperationalError, on_database)
    app.add_exception_handler(DBAPIError, on_database)
    app.add_exception_handler(PoolTimeout, on_database)  # every connection busy: unavailable too


class SecurityHeadersMiddleware:
    """Adds SECURITY_HEADERS to every HTTP response that does not already carry them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(n, v) for n, v in SECURITY_HEADERS if n not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HeadAsGetMiddleware:
    """HEAD answered as GET without its body (RFC 9110 §9.3.2): FastAPI routes declared for GET
    refused HEAD with 405, so load balancers and uptime checks probing with HEAD read the API as
    down. `exclude`: paths whose GET never ends (the event stream), left to refuse HEAD."""

    def __init__(self, app: ASGIApp, exclude: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.exclude = exclude

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD" or scope["path"] in self.exclude:
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, without_body)


class InternalErrorMiddleware:
    """Any exception no handler took becomes the API's JSON 500 here, inside the security headers'
    and the metrics' middleware (Starlette's own last resort sits outside both: a plain-text 500
    with neither the headers nor a count). A response already started can only be cut short."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception:
            if started:
                raise
            log.exception("unhandled error on %s", scope.get("path", "?"))
            response = error_response(500, "internal_error", "the request could not be answered")
            await response(scope, receive, send)


class PolicyStaticFiles(StaticFiles):
    """Static files sent with a Content-Security-Policy: `policies[name]` for the file `name`, else
    `default`. The pages served at / and /docs are files here too and must carry the same policy."""

    def __init__(self, *, directory: Path, default: str, policies: Mapping[str, str]) -> None:
        super().__init__(directory=directory)
        self._default = default
        self._policies = dict(policies)

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = self._policies.get(path, self._default)
        # revalidated on every load (the ETag makes that cheap): cached heuristically, an upgraded
        # API's dashboard ran the old scripts against the new endpoints
        response.headers["Cache-Control"] = "no-cache"
        return response
