"""The database triggers that write the snapshot's change log (``SnapshotChange``).

Every write that changes what ``scheduler.adapters.build_snapshot`` reads of a node - the node
row, its GPUs, their partitions, a partition's hold - adds a ``SnapshotChange`` row naming the
node, in the same transaction. Triggers rather than calls in Python: inventory sync, telemetry
(raw SQL), reservations, releases, the admin and data migrations all write these tables, and a
writer that forgot to log would leave every process's snapshot silently stale. Only the columns
the snapshot reads count, and only when a value really changed (inventory sync rewriting the
same values logs nothing).

- PostgreSQL: one trigger per table and event, ``FOR EACH STATEMENT`` over the transition
  tables, so that a statement touching 40,000 GPUs (a telemetry poll) logs each node once, in
  one set-based insert. Each row carries the writer's transaction id (see ``SnapshotChange``).
- SQLite: row triggers (it has no statement triggers); writers are serialised there anyway.

``install(connection)`` (re)creates them all and is idempotent; the migration that created the
log calls it, and so does every ``post_migrate`` (``scheduler.apps``): on SQLite, Django
rebuilds a table it alters (copy, drop, rename), which drops that table's triggers, so a later
migration of ``nodes`` would otherwise lose them. ``installed(connection)`` tells whether they
are all there; the snapshot cache refuses to run incrementally without them.
"""
from __future__ import annotations

from dataclasses import dataclass

from django.db.backends.base.base import BaseDatabaseWrapper

PREFIX = "gpuplane_snapshot_"
LOG_TABLE = "scheduler_snapshotchange"


@dataclass(frozen=True)
class Watched:
    """A table the snapshot reads: its key, the columns that matter, and how a row names its node.

    ``node_of`` is a SELECT of ``node_id`` over rows aliased ``r`` (``{rows}`` is replaced by
    the rows' source: a transition table on PostgreSQL, a one-row SELECT on SQLite).
    """

    name: str
    table: str
    key: str
    columns: tuple[str, ...]
    node_of: str


WATCHED = (
    Watched("node", "nodes_node", "id",
            ("name", "gpu_model", "sharing_mode", "sharing_replicas", "labels", "taints", "ready", "cordoned",
             "cpu_allocatable_milli", "memory_allocatable_mib", "cpu_requested_milli", "memory_requested_mib"),
            'SELECT r."id" AS node_id FROM {rows} AS r'),
    Watched("gpu", "nodes_gpu", "id",
            ("node_id", "index", "memory_mib", "mig_enabled", "allocated_memory_mib", "utilization_pct",
             "memory_used_mib", "power_w"),
            'SELECT r."node_id" AS node_id FROM {rows} AS r'),
    Watched("partition", "nodes_partition", "id",
            ("gpu_id", "kind", "slot", "share_milli", "memory_mib", "mig_profile", "mig_start", "mig_size", "pod"),
            'SELECT g."node_id" AS node_id FROM {rows} AS r JOIN "nodes_gpu" AS g ON g."id" = r."gpu_id"'),
    Watched("hold", "scheduler_partitionhold", "partition_id", ("partition_id", "placement_id"),
            'SELECT g."node_id" AS node_id FROM {rows} AS r JOIN "nodes_partition" AS p ON p."id" = r."partition_id" '
            'JOIN "nodes_gpu" AS g ON g."id" = p."gpu_id"'),
)
EVENTS = ("insert", "update", "delete")


def trigger_names() -> list[str]:
    return [f"{PREFIX}{watched.name}_{event}" for watched in WATCHED for event in EVENTS]


def _columns(alias: str, columns: tuple[str, ...]) -> str:
    return ", ".join(f'{alias}."{column}"' for column in columns)


def _postgresql(watched: Watched, event: str) -> list[str]:
    name = f"{PREFIX}{watched.name}_{event}"
    insert = (f'INSERT INTO "{LOG_TABLE}" ("node_id", "txid", "created_at") '
              "SELECT DISTINCT c.node_id, pg_current_xact_id()::text::bigint, now() FROM ({select}) AS c "
              "WHERE c.node_id IS NOT NULL;")
    if event == "update":
        changed = (f'SELECT n.* FROM new_rows AS n JOIN old_rows AS o ON o."{watched.key}" = n."{watched.key}" '
                   f"WHERE ({_columns('o', watched.columns)}) IS DISTINCT FROM ({_columns('n', watched.columns)})")
        before = (f'SELECT o.* FROM old_rows AS o JOIN new_rows AS n ON o."{watched.key}" = n."{watched.key}" '
                  f"WHERE ({_columns('o', watched.columns)}) IS DISTINCT FROM ({_columns('n', watched.columns)})")
        select = (watched.node_of.format(rows=f"({changed})") + " UNION "
                  + watched.node_of.format(rows=f"({before})"))
        referencing = "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    else:
        rows = "new_rows" if event == "insert" else "old_rows"
        select = watched.node_of.format(rows=rows)
        referencing = f"REFERENCING {'NEW' if event == 'insert' else 'OLD'} TABLE AS {rows}"
    return [
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $body$ "
        f"BEGIN {insert.format(select=select)} RETURN NULL; END; $body$;",
        f'CREATE OR REPLACE TRIGGER {name} AFTER {event.upper()} ON "{watched.table}" {referencing} '
        f"FOR EACH STATEMENT EXECUTE FUNCTION {name}();",
    ]


def _sqlite(watched: Watched, event: str) -> list[str]:
    name = f"{PREFIX}{watched.name}_{event}"
    insert = (f'INSERT INTO "{LOG_TABLE}" ("node_id", "txid", "created_at") '
              "SELECT c.node_id, NULL, strftime('%Y-%m-%d %H:%M:%f', 'now') FROM ({select}) AS c "
              "WHERE c.node_id IS NOT NULL;")

    def row(alias: str) -> str:
        values = ", ".join(f'{alias}."{column}" AS "{column}"' for column in watched.columns)
        key = "" if watched.key in watched.columns else f', {alias}."{watched.key}" AS "{watched.key}"'
        return f"(SELECT {values}{key})"

    if event == "update":
        changed = " OR ".join(f'OLD."{column}" IS NOT NEW."{column}"' for column in watched.columns)
        columns = ", ".join(f'"{column}"' for column in watched.columns)
        body = insert.format(select=watched.node_of.format(rows=row("NEW")) + " UNION "
                             + watched.node_of.format(rows=row("OLD")))
        head = f'AFTER UPDATE OF {columns} ON "{watched.table}" FOR EACH ROW WHEN {changed}'
    else:
        body = insert.format(select=watched.node_of.format(rows=row("NEW" if event == "insert" else "OLD")))
        head = f'AFTER {event.upper()} ON "{watched.table}" FOR EACH ROW'
    return [f"DROP TRIGGER IF EXISTS {name};", f"CREATE TRIGGER {name} {head} BEGIN {body} END;"]


def statements(vendor: str) -> list[str]:
    """The SQL that (re)creates every trigger on ``vendor`` ("postgresql" or "sqlite")."""
    build = {"postgresql": _postgresql, "sqlite": _sqlite}.get(vendor)
    if build is None:
        raise NotImplementedError(f"no snapshot change-log triggers for {vendor}")
    return [sql for watched in WATCHED for event in EVENTS for sql in build(watched, event)]


def install(connection: BaseDatabaseWrapper) -> None:
    """(Re)create every trigger; idempotent."""
    with connection.cursor() as cursor:
        for sql in statements(connection.vendor):
            cursor.execute(sql)


def installed(connection: BaseDatabaseWrapper) -> bool:
    """True when every trigger exists on ``connection``'s database."""
    names = trigger_names()
    if connection.vendor == "postgresql":
        query = "SELECT tgname FROM pg_trigger WHERE tgname LIKE %s"
    elif connection.vendor == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s"
    else:
        return False
    with connection.cursor() as cursor:
        cursor.execute(query, [f"{PREFIX}%"])
        found = {row[0] for row in cursor.fetchall()}
    return found.issuperset(names)
