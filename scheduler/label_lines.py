"""Labels typed as text, one `key=value` a line: the deploy form's box and a form-encoded API post."""
from __future__ import annotations

from django.core.exceptions import ValidationError


def parse_labels(text: str) -> dict[str, str]:
    """Read one `key=value` label a line into a dict; blank lines are skipped.

    Raises ValidationError naming the line for a line without "=", an empty key or a key given
    twice. Whether a key or value is a valid Kubernetes label is the services' rule, not this
    parser's.
    """
    labels: dict[str, str] = {}
    errors: list[ValidationError] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            errors.append(ValidationError(
                "Line %(line)s: write one label a line as key=value.", code="syntax", params={"line": number}
            ))
        elif key in labels:
            errors.append(ValidationError(
                "Line %(line)s: label %(key)s is given twice.", code="duplicate", params={"line": number, "key": key}
            ))
        else:
            labels[key] = value
    if errors:
        raise ValidationError(errors)
    return labels
