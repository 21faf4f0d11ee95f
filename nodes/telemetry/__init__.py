"""Telemetry storage: ingest GPU samples, keep the latest values on GPU rows, roll up and expire, chart.

One concern per module; import from the module that owns a name:

- `samples`     what a sample is: SampleIn, the metrics and their accepted ranges (pure Python)
- `limits`      each GPU's physical limits from the catalog (memory, 1.5 x TDP, 1.25 x max clock)
- `batch`       an API batch's JSON -> typed samples in bulk (no serializer), malformed ones named by index
- `validation`  the rules a sample must pass (column by column), TelemetryRejected and the shape of errors
- `storage`     the database statements: resolve GPU UUIDs, insert samples, refresh GPU rows
- `ingest`      ingest_samples (an agent's batch: the good samples stored, the bad named) and write_samples
- `readings`    store_readings (a collector's readings: store what can be, count what cannot)
- `poll`        store_poll (one server poll of the whole fleet, stored in shards of nodes)
- `partitions`  PostgreSQL: the raw sample table's time partitions, made ahead and on demand, dropped at expiry
- `buckets`     epoch-aligned time buckets and their running means and maxima
- `rollup`      rollup_and_expire: raw samples into buckets, retention of both
- `series`      gpu_series / node_series for the charts, from the database
- `prometheus`  the same series from Prometheus, when GPUPLANE_PROMETHEUS_URL makes it the store
- `exposition`  the latest per-GPU readings in DCGM exporter's format, for Prometheus to scrape
"""
