"""On PostgreSQL, make the raw sample table partitioned by range of `ts` (nodes.telemetry.partitions).

Expiry then drops whole partitions instead of deleting rows one by one. SQLite keeps the plain
table: both directions do nothing there, and Django's model state is unchanged everywhere.

PostgreSQL wants the partition key in every primary key and unique constraint: the primary key
becomes (id, ts), ids still come from one sequence (PostgreSQL 15 has no identity columns on
partitioned tables), (gpu, ts) stays unique under its own name, and the index on gpu_id alone is
not recreated (the unique index on (gpu_id, ts) serves it). Existing rows go to the DEFAULT
partition; the range partitions are created at run time, moving their rows out of it.
"""
from django.db import migrations

TABLE = "nodes_gpusample"
OLD = "nodes_gpusample_unpartitioned"
PARTITIONED = "nodes_gpusample_partitioned"
SEQUENCE = "nodes_gpusample_id_seq"


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'f'", [TABLE]
        )
        (foreign_key,) = cursor.fetchone()
        run(f"ALTER TABLE {TABLE} RENAME TO {OLD}")
        # LIKE copies the columns, NOT NULL and CHECK constraints, not the identity nor the indexes.
        run(f"CREATE TABLE {TABLE} (LIKE {OLD} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (ts)")
        run(f"CREATE TABLE {TABLE}_default PARTITION OF {TABLE} DEFAULT")
        run(f"INSERT INTO {TABLE} SELECT * FROM {OLD}")
        cursor.execute(f"SELECT coalesce(max(id), 0) + 1 FROM {OLD}")
        (next_id,) = cursor.fetchone()
        run(f"DROP TABLE {OLD}")  # with its identity sequence, which had the name taken below
        run(f"CREATE SEQUENCE {SEQUENCE} OWNED BY {TABLE}.id")
        run(f"SELECT setval('{SEQUENCE}', {int(next_id)}, false)")
        run(f"ALTER TABLE {TABLE} ALTER COLUMN id SET DEFAULT nextval('{SEQUENCE}')")
        run(f"ALTER TABLE {TABLE} ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (id, ts)")
        run(f"ALTER TABLE {TABLE} ADD CONSTRAINT gpusample_unique_gpu_ts UNIQUE (gpu_id, ts)")
        run(f"CREATE INDEX gpusample_ts_idx ON {TABLE} (ts)")
        run(
            f"ALTER TABLE {TABLE} ADD CONSTRAINT {foreign_key} FOREIGN KEY (gpu_id) REFERENCES nodes_gpu (id) "
            "DEFERRABLE INITIALLY DEFERRED"
        )


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    run = schema_editor.execute
    run(f"ALTER TABLE {TABLE} RENAME TO {PARTITIONED}")
    run(f"ALTER TABLE {PARTITIONED} DROP CONSTRAINT {TABLE}_pkey, DROP CONSTRAINT gpusample_unique_gpu_ts")
    run("DROP INDEX gpusample_ts_idx")
    run(f"ALTER SEQUENCE {SEQUENCE} RENAME TO {PARTITIONED}_id_seq")
    # The plain table exactly as migrations 0003 made it: identity id, every index and constraint.
    schema_editor.create_model(apps.get_model("nodes", "GPUSample"))
    columns = "id, gpu_id, ts, utilization_pct, memory_used_mib, memory_total_mib, power_w, temperature_c, " \
              "sm_clock_mhz, source"
    run(f"INSERT INTO {TABLE} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM {PARTITIONED}")
    run(
        f"SELECT setval(pg_get_serial_sequence('{TABLE}', 'id'), coalesce(max(id), 0) + 1, false) FROM {TABLE}"
    )
    run(f"DROP TABLE {PARTITIONED} CASCADE")  # its partitions and its sequence too


class Migration(migrations.Migration):

    dependencies = [
        ("nodes", "0008_inventory_watch_generation"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition, elidable=False),
    ]
