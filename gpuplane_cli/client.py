"""The REST API over HTTP, with the standard library only: JSON in and out, `Authorization: Token`,
lists followed page by page. Errors are raised as ``APIError`` (an HTTP answer >= 400) or
``ConnectionFailed`` (no answer); ``errors.py`` words them."""
from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpuplane_cli import __version__
from gpuplane_cli.errors import APIError, ConnectionFailed

API_PREFIX = "/api/v1/"
PAGE_LIMIT = 500  # the API's largest page (gpuplane.api.MAX_PAGE_LIMIT): fewest round trips
Params = Mapping[str, str | int | Sequence[str]]


class Client:
    """One server, one token (may be empty for the token request itself)."""

    def __init__(self, server: str, token: str = "", *, timeout_s: float = 30.0, insecure: bool = False) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        context: ssl.SSLContext | None = None
        if insecure:  # --insecure-skip-tls-verify: the user asked for it, as with kubectl's flag
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirects())

    def url(self, path: str, params: Params | None = None) -> str:
        """``path`` under `/api/v1/` (or absolute from the root when it starts with `/`), with ``params``;
        a list value repeats the parameter (``status=a&status=b``)."""
        full = self.server + (path if path.startswith("/") else API_PREFIX + path)
        if params:
            full += "?" + urllib.parse.urlencode(
                [(key, str(item)) for key, value in params.items()
                 for item in (value if isinstance(value, (list, tuple)) else [value])])
        return full

    def request(self, method: str, path: str, *, params: Params | None = None, body: Any = None,
                authenticate: bool = True) -> Any:
        """Send one request; the answer's JSON (None for an empty body). Raises APIError for a
        status >= 400 and ConnectionFailed when nothing answered."""
        url = self.url(path, params)
        headers = {"Accept": "application/json", "User-Agent": f"gpuplane-cli/{__version__}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if authenticate and self.token:
            headers["Authorization"] = f"Token {self.token}"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                return _parsed(answer.read(), answer.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as error:
            content = error.read()
            raise APIError(error.code, _parsed(content, error.headers.get("Content-Type", "")), method, url,
                           location=error.headers.get("Location", "")) from None
        except urllib.error.URLError as error:
            raise _connection_failure(self.server, error.reason) from None
        except TimeoutError:
            raise ConnectionFailed(self.server, f"no answer within {self.timeout_s:g} s") from None
        except (ConnectionError, http.client.HTTPException) as error:
            raise ConnectionFailed(self.server, str(error) or type(error).__name__) from None

    def get(self, path: str, params: Params | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body={} if body is None else body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def pages(self, path: str, params: Params | None = None) -> Iterator[dict[str, Any]]:
        """Every result of a paginated list (`{count, results}`), page after page by offset: the
        `next` links carry the host the server saw, which behind a proxy need not be ours."""
        offset = 0
        while True:
            page = self.get(path, {**(params or {}), "limit": PAGE_LIMIT, "offset": offset})
            results = page.get("results") or []
            yield from results
            offset += len(results)
            if not results or offset >= int(page.get("count") or 0):
                return


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered, not followed: urllib would resend the token to wherever it points
    and turn a POST into a GET (`http://` to `https://` on a production server, for one)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        return None


def _parsed(content: bytes, content_type: str) -> Any:
    if not content:
        return None
    text = content.decode("utf-8", errors="replace")
    if "json" in content_type:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


def _connection_failure(server: str, reason: object) -> ConnectionFailed:
    if isinstance(reason, ConnectionRefusedError):
        return ConnectionFailed(server, "connection refused", refused=True)
    if isinstance(reason, TimeoutError):
        return ConnectionFailed(server, "no answer in time")
    if isinstance(reason, socket.gaierror):
        host = urllib.parse.urlsplit(server).hostname or server
        return ConnectionFailed(server, f"dial tcp: lookup {host}: no such host")
    if isinstance(reason, ssl.SSLError):
        return ConnectionFailed(server, f"tls: {getattr(reason, 'reason', None) or reason}")
    return ConnectionFailed(server, str(reason))
