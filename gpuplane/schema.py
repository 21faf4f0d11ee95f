"""The OpenAPI schema class of every API view (settings.REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]).

drf-spectacular documents what a view returns when all goes well. The API also answers:

- 400 with field messages for any bad query parameter or body (gpuplane.api), so an operation
  that takes either documents a 400;
- 400 naming a path parameter that holds NUL or a lone surrogate (gpuplane/path_parameters.py),
  which the parameter's `pattern` states;
- 404 for an object that does not exist, so an operation with a path parameter documents a 404
  (as JSON from the API, or as Django's HTML page when the path does not match the URL pattern,
  e.g. a non-numeric id);

and it refuses filter values outside a filter's `min_value`/`max_value`, so those bounds go into
the parameter's schema. Clients (and schemathesis, tests/gpuplane/test_schemathesis.py) can then
rely on the schema: what it allows is accepted, what the API refuses is documented.
"""
from __future__ import annotations

from typing import Any

from django import forms
from drf_spectacular.openapi import AutoSchema

from gpuplane.path_parameters import PATH_PARAMETER_PATTERN
from gpuplane.strict_input import RejectUnknownFieldsMixin

NO_NUL_CHARACTER = "^[^\\x00]*$"
ERROR_BODY = {
    "type": "object",
    "additionalProperties": {},
    "description": "Messages by field name, or `detail` for the request as a whole.",
}


class GpuplaneAutoSchema(AutoSchema):
    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        # A strict serializer answers 400 for a field it does not know: the schema says so.
        if direction == "request" and isinstance(serializer, RejectUnknownFieldsMixin):
            schema["additionalProperties"] = False
        return schema

    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        parameters = operation.get("parameters", [])
        text_in_path = False
        for parameter in parameters:
            if parameter["in"] == "query":
                self._insert_filter_bounds(parameter)
            schema = parameter.get("schema", {})
            if parameter["in"] == "path" and schema.get("type") == "string" and not {"pattern", "enum", "format"} & set(schema):
                schema["pattern"] = PATH_PARAMETER_PATTERN
                text_in_path = True
        responses = operation.setdefault("responses", {})
        if "requestBody" in operation or text_in_path or any(p["in"] == "query" for p in parameters):
            # setdefault twice: a view's own description (extend_schema) is kept, its body filled in.
            responses.setdefault("400", {"description": "Invalid query parameters or body"}).setdefault(
                "content", {"application/json": {"schema": ERROR_BODY}}
            )
        if any(p["in"] == "path" for p in parameters):
            responses.setdefault("404", {"description": "No such object"}).setdefault("content", {
                "application/json": {"schema": ERROR_BODY},
                "text/html": {"schema": {"type": "string"}},
            })
        return operation

    def _insert_filter_bounds(self, parameter: dict[str, Any]) -> None:
        filterset_class = getattr(self.view, "filterset_class", None)
        if filterset_class is None:
            return
        query_filter = filterset_class.base_filters.get(parameter["name"])
        if query_filter is None:
            return
        schema = parameter.get("schema", {})
        # Django's form CharField refuses NUL characters (ProhibitNullCharactersValidator), a 400.
        for text in (schema, schema.get("items", {})):
            if text.get("type") == "string" and "enum" not in text and "format" not in text:
                text.setdefault("pattern", NO_NUL_CHARACTER)
        # A whole-number filter (forms.IntegerField) refuses 1.5: the schema says integer, not number.
        if issubclass(query_filter.field_class, forms.IntegerField) and schema.get("type") == "number":
            schema["type"] = "integer"
            schema.pop("format", None)
        if "min_value" in query_filter.extra:
            schema["minimum"] = query_filter.extra["min_value"]
        if "max_value" in query_filter.extra:
            schema["maximum"] = query_filter.extra["max_value"]


FORM_MEDIA_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def form_body_schema(component: dict[str, Any]) -> dict[str, Any]:
    """The shape a form-encoded body can take of a JSON body's schema.

    Form values are text: there is no null (leave the field out for its default), and an object
    field is text too, one `key=value` a line (the deploy form's labels, gpuplane.LabelsField).
    """
    properties = {}
    for name, field in component.get("properties", {}).items():
        field = {key: value for key, value in field.items() if key != "nullable"}
        if field.get("type") == "object":
            field = {"type": "string", "description": "One `key=value` a line."}
        properties[name] = field
    return {**component, "properties": properties}


def postprocess_form_bodies(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook: form media types get `<Name>Form`, their own component."""
    components = result.get("components", {}).get("schemas", {})
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {}) if isinstance(operation, dict) else {}
            for media_type in FORM_MEDIA_TYPES:
                ref = content.get(media_type, {}).get("schema", {}).get("$ref", "")
                name = ref.rsplit("/", 1)[-1]
                if name not in components:
                    continue
                components.setdefault(f"{name}Form", form_body_schema(components[name]))
                content[media_type]["schema"] = {"$ref": f"#/components/schemas/{name}Form"}
    return result
