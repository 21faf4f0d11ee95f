"""Rule 3: "nodes never depends on scheduler" holds in the schema and in queries too.

No nodes model has a field that relates to a scheduler model (the hold of a partition by a
placement lives on the scheduler side), and no code under nodes/ names a scheduler relation in an
ORM lookup (`placement__isnull`, `"placement__deployment__namespace"`, `.placement_id`) or a
scheduler model by name (`apps.get_model("scheduler", ...)`). Needs Django's app registry.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from django.apps import apps
from django.db.models import Model
from django.db.models.options import Options

from tests.architecture.graph import ROOT, source_files

# The brief's examples, and whatever relation between nodes and scheduler models exists now.
KNOWN_RELATION_NAMES = frozenset({"placement", "placements", "deployment", "deployments"})
# Calls whose keywords are lookups (`filter(placement__isnull=True)`), and calls whose string
# arguments are lookup paths (`select_related("placement")`); dict.get("placement") is neither.
KEYWORD_LOOKUP_CALLS = frozenset({
    "filter", "exclude", "get", "create", "update", "get_or_create", "update_or_create", "Q", "FilteredRelation",
})
PATH_ARGUMENT_CALLS = frozenset({
    "select_related", "prefetch_related", "values", "values_list", "only", "defer", "order_by", "distinct",
    "F", "Prefetch", "Count", "Sum", "Avg", "Min", "Max", "OuterRef", "FilteredRelation",
})
LOOKUP_PATH = re.compile(r"-?[A-Za-z_][A-Za-z0-9_]*(?:__[A-Za-z0-9_]+)+")
MODEL_REGISTRY_CALLS = frozenset({"get_model", "get_app_config", "get_models"})


def _scheduler_models() -> list[type[Model]]:
    return list(apps.get_app_config("scheduler").get_models(include_auto_created=True))


def _is_scheduler(model: object) -> bool:
    if not (isinstance(model, type) and issubclass(model, Model)):
        return False
    meta: Options = model._meta  # type: ignore[attr-defined]  # typed as plain `type` without django-stubs
    return meta.app_label == "scheduler"


def scheduler_relation_names() -> frozenset[str]:
    """Names by which a nodes model can reach a scheduler model in a lookup, plus the known ones."""
    names = set(KNOWN_RELATION_NAMES)
    for model in apps.get_app_config("nodes").get_models(include_auto_created=True):
        for relation in model._meta.get_fields(include_hidden=True):
            if relation.is_relation and _is_scheduler(relation.related_model):
                names.add(relation.name)
    return frozenset(name for name in names if "+" not in name)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _names_relation(path: str, names: frozenset[str]) -> bool:
    return any(part in names for part in path.lstrip("-").split("__"))


def find_relation_lookups(source: str, names: frozenset[str]) -> list[tuple[int, str]]:
    """(line, what) for every place `source` names one of the relations `names` in an ORM lookup."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    attnames = {f"{name}_id" for name in names}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value
            if LOOKUP_PATH.fullmatch(text) and _names_relation(text, names):
                found.append((node.lineno, repr(text)))
        elif isinstance(node, ast.Attribute) and node.attr in attnames:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Call):
            lookups = _call_name(node) in KEYWORD_LOOKUP_CALLS
            for keyword in node.keywords:
                name = keyword.arg
                if name and (("__" in name and _names_relation(name, names)) or (lookups and name in names | attnames)):
                    found.append((node.lineno, f"{name}="))
            if _call_name(node) in PATH_ARGUMENT_CALLS:
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        text = arg.value.lstrip("-")
                        if text in names or text in attnames:
                            found.append((node.lineno, f"{_call_name(node)}({arg.value!r})"))
    return sorted(set(found))


def find_scheduler_model_names(source: str, labels: frozenset[str]) -> list[tuple[int, str]]:
    """(line, what) where `source` names a scheduler model: a model label or a registry lookup."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if node.value.lower() in labels:
                found.append((node.lineno, repr(node.value)))
        elif isinstance(node, ast.Call) and _call_name(node) in MODEL_REGISTRY_CALLS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.split(".")[0] == "scheduler":
                found.append((node.lineno, f"{_call_name(node)}({first.value!r}, ...)"))
    return sorted(set(found))


def _nodes_sources() -> list[Path]:
    # Migrations are history: an old one may still name a relation that a later one removed.
    return [path for path in source_files(ROOT, ["nodes"]) if "migrations" not in path.parts]


def test_no_nodes_model_field_relates_to_a_scheduler_model():
    bad = []
    for model in apps.get_app_config("nodes").get_models(include_auto_created=True):
        meta = model._meta
        for forward in [*meta.fields, *meta.many_to_many, *meta.private_fields]:
            through = getattr(getattr(forward, "remote_field", None), "through", None)
            if _is_scheduler(forward.related_model) or _is_scheduler(through):
                bad.append(f"{meta.label}.{forward.name} -> {forward.related_model._meta.label}")
    assert bad == [], "nodes models must not point at scheduler models:\n" + "\n".join(bad)


def test_nodes_code_names_no_scheduler_relation_in_a_lookup():
    names = scheduler_relation_names()
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _nodes_sources()
        for line, what in find_relation_lookups(path.read_text(encoding="utf-8"), names)
    ]
    assert bad == [], f"nodes queries must not follow scheduler relations ({sorted(names)}):\n" + "\n".join(bad)


def test_nodes_code_names_no_scheduler_model():
    labels = frozenset(model._meta.label_lower for model in _scheduler_models())
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _nodes_sources()
        for line, what in find_scheduler_model_names(path.read_text(encoding="utf-8"), labels)
    ]
    assert bad == [], "nodes must not name scheduler models:\n" + "\n".join(bad)


def test_the_lookup_scan_itself():
    names = frozenset({"placement", "placements", "deployment"})
    source = '''
"""Docstrings may say placement__isnull."""
Partition.objects.filter(placement__isnull=True, pod="")
Partition.objects.values_list("placement_id", "placement__deployment__namespace")
Node.objects.filter(pk__in=ids, placements__isnull=False)
Partition.objects.select_related("placement")
Partition.objects.exclude(placement=None)
if partition.placement_id:
    pass
ok = Partition.objects.filter(gpu__node__name="a", mig_start__gte=2).order_by("-slot")
layout = validate_placements(model, placements)
placement_start = "__init__"
if sim.get("deployment"):
    pass
'''
    assert find_relation_lookups(source, names) == [
        (3, "placement__isnull="),
        (4, "'placement__deployment__namespace'"),
        (4, "values_list('placement_id')"),
        (5, "placements__isnull="),
        (6, "select_related('placement')"),
        (7, "placement="),
        (8, ".placement_id"),
    ]
    models = '''
Placement = apps.get_model("scheduler", "Placement")
other = apps.get_model("scheduler.Deployment")
fk = models.ForeignKey("scheduler.Placement", on_delete=models.CASCADE)
fine = apps.get_model("nodes", "Node")
'''
    labels = frozenset({"scheduler.placement", "scheduler.deployment"})
    assert find_scheduler_model_names(models, labels) == [
        (2, "get_model('scheduler', ...)"),
        (3, "'scheduler.Deployment'"),
        (3, "get_model('scheduler.Deployment', ...)"),
        (4, "'scheduler.Placement'"),
    ]
