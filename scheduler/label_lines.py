"""Labels and environment variables typed as text, one `key=value` a line, and arguments one a
line: the deploy form's boxes and a form-encoded API post."""
from __future__ import annotations

from django.core.exceptions import ValidationError


def parse_labels(text: str) -> dict[str, str]:
    """Read one `key=value` label a line into a dict; blank lines are skipped.

    Raises ValidationError naming the line for a line without "=", an empty key or a key given
    twice. Whether a key or value is a valid Kubernetes label is the services' rule, not this
    parser's.
    """
    return _pairs(text, "label")


def parse_env(text: str) -> dict[str, str]:
    """Read one `NAME=value` environment variable a line (the value is everything after the first
    "=", spaces around it trimmed); blank lines are skipped; errors as `parse_labels`'."""
    return _pairs(text, "variable")


def parse_arguments(text: str) -> list[str]:
    """One argument a line (so an argument may hold spaces); blank lines are skipped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _pairs(text: str, noun: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    errors: list[ValidationError] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            errors.append(ValidationError(
                "Line %(line)s: write one %(noun)s a line as key=value.", code="syntax",
                params={"line": number, "noun": noun},
            ))
        elif key in pairs:
            errors.append(ValidationError(
                "Line %(line)s: %(noun)s %(key)s is given twice.", code="duplicate",
                params={"line": number, "key": key, "noun": noun},
            ))
        else:
            pairs[key] = value
    if errors:
        raise ValidationError(errors)
    return pairs
