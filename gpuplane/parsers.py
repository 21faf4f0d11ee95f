"""Request body parsers with limits: any body is parsed or refused with a 400, never a 500.

DRF's own parsers read the whole stream (bypassing Django's DATA_UPLOAD_MAX_MEMORY_SIZE, which
only guards `request.body`) and hand it to `json.loads`, whose recursion on 100,000 `[` ends in
a RecursionError, not a ValueError, so it escapes as a 500. These read at most
DATA_UPLOAD_MAX_MEMORY_SIZE bytes and refuse JSON nested deeper than MAX_JSON_DEPTH.
A JSON string may also spell a lone UTF-16 surrogate (`"\\ud800"`), which is no character: it
would reach a field's message ("... is not a valid choice") and fail the JSON renderer. Such a
body is a 400 naming the field that holds it (`{"priority": [...]}`), for every endpoint at once.
They are DRF's DEFAULT_PARSER_CLASSES (settings.REST_FRAMEWORK).
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import QueryDict
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser

# The API's deepest legitimate body is a telemetry batch: {"samples": [{...}]}, depth 3.
MAX_JSON_DEPTH = 20


def max_body_bytes() -> int:
    """Django's body limit, also applied to bodies that DRF parses from the raw stream."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return int(limit) if limit is not None else 2_621_440


def too_large_error(limit: int | None = None) -> ParseError:
    """The 400 for a body over the limit (also raised by Django's own check: gpuplane.api)."""
    return ParseError(f"Request body too large: at most {limit or max_body_bytes()} bytes are accepted.")


def refuse_declared_oversize(parser_context: Mapping[str, Any] | None) -> int:
    """The body limit; ParseError at once when the Content-Length header already exceeds it."""
    limit = max_body_bytes()
    request = (parser_context or {}).get("request")
    declared = str(request.META.get("CONTENT_LENGTH") or "") if request is not None else ""
    if declared.isdigit() and int(declared) > limit:
        raise too_large_error(limit)
    return limit


def read_bounded(stream: IO[bytes] | None, parser_context: Mapping[str, Any] | None) -> bytes:
    """The whole body, or ParseError when it is (or announces itself) larger than the limit."""
    limit = refuse_declared_oversize(parser_context)
    if stream is None:
        return b""
    body = stream.read(limit + 1)
    if len(body) > limit:
        raise too_large_error(limit)
    return body


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0, `[]` is 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


_SURROGATE = re.compile("[\ud800-\udfff]")
SURROGATE_MESSAGE = "Text must be valid Unicode: a lone surrogate (\\ud800-\\udfff) is not allowed."


def surrogate_fields(value: Any) -> dict[str, list[str]]:
    """Messages by field path (`priority`, `samples.0.node`) for each key or string holding a lone surrogate."""
    found: dict[str, list[str]] = {}
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                if _SURROGATE.search(key):
                    found[child_path] = [SURROGATE_MESSAGE]
                stack.append((child, child_path))
        elif isinstance(item, list):
            stack.extend((child, f"{path}.{index}" if path else str(index)) for index, child in enumerate(item))
        elif isinstance(item, str) and _SURROGATE.search(item):
            found[path or "non_field_errors"] = [SURROGATE_MESSAGE]
    # A path is made of keys, which may hold the surrogate themselves: never echo one back.
    return {_SURROGATE.sub("?", path): messages for path, messages in found.items()}


# Both walks of the parsed value cost more than json.loads itself (an agent's batch: 80 us against
# 23 us); the text rules them out for almost every body with a scan in C, and the walk decides
# the rest.


def _may_nest_deeper(text: str, max_depth: int) -> bool:
    """False when `text` cannot nest deeper than `max_depth`: each level opens with a `[` or `{`."""
    return text.count("[") + text.count("{") > max_depth


def _may_hold_surrogate(text: str) -> bool:
    """False when JSON `text` cannot decode to a lone surrogate: it holds none itself (ASCII) and
    spells none as an escape (`\\ud800`: every escape starts with `\\u`)."""
    return not text.isascii() or "\\u" in text


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class LimitedJSONParser(JSONParser):
    """JSON of at most DATA_UPLOAD_MAX_MEMORY_SIZE bytes and MAX_JSON_DEPTH levels; no NaN/Infinity."""

    max_depth = MAX_JSON_DEPTH

    def parse(self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        body = read_bounded(stream, parser_context)
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = body.decode(encoding)
            data = json.loads(text, parse_constant=_refuse_constant)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {self.max_depth} levels.") from None
        except (ValueError, LookupError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise ParseError(f"JSON parse error - {exc}") from None
        if _may_nest_deeper(text, self.max_depth) and json_depth(data) > self.max_depth:
            raise ParseError(f"JSON parse error - nested deeper than {self.max_depth} levels.")
        errors = surrogate_fields(data) if _may_hold_surrogate(text) else {}
        if errors:
            raise ValidationError(errors)
        return data


class LimitedFormParser(FormParser):
    """URL-encoded forms of at most DATA_UPLOAD_MAX_MEMORY_SIZE bytes and Django's field count limit."""

    def parse(self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        body = read_bounded(stream, parser_context)
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return QueryDict(body, encoding=encoding)
        except (SuspiciousOperation, ValueError, LookupError) as exc:  # TooManyFieldsSent, a bad charset
            raise ParseError(f"Form parse error - {exc}") from None


class LimitedMultiPartParser(MultiPartParser):
    """Multipart bodies refused up front when their Content-Length exceeds the limit.

    Django's multipart parser already bounds the non-file fields (DATA_UPLOAD_MAX_MEMORY_SIZE)
    and their count; no endpoint takes files, so the whole body is held to the same limit.
    Its SuspiciousOperations (too many fields or files) become 400s with a message here.
    """

    def parse(self, stream: IO[bytes] | None, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        refuse_declared_oversize(parser_context)
        try:
            return super().parse(stream, media_type, parser_context)
        except SuspiciousOperation as exc:
            raise ParseError(f"Multipart form parse error - {exc}") from None
