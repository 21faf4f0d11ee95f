"""gpuplane settings, read from the environment (see docs/operations.md, "Configuration").

Development defaults are safe and need no external service: SQLite under var/, an embedded
Celery broker on the filesystem, the simulated cluster. Production sets DATABASE_URL,
REDIS_URL and GPUPLANE_CLUSTER=kubernetes.
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

# DRF and the OpenAPI schema: Django reads both names from this module.
from gpuplane.api_settings import REST_FRAMEWORK, SPECTACULAR_SETTINGS  # noqa: F401

# Autoscaling and feedback (docs/concepts.md): the names in its __all__.
from gpuplane.autoscale_settings import *  # noqa: F403
from gpuplane.autoscale_settings import AUTOSCALE_BEAT
from gpuplane.database_settings import databases
from gpuplane.disruption import DISRUPTION_BUDGET, DISRUPTION_MIN_INTERVAL_S, MOVE_BEAT, MOVE_TIMEOUT_S  # noqa: F401
from gpuplane.env import env_bool, env_choice, env_header_pair, env_int, env_list, env_number_map, env_rate, env_str
from gpuplane.logs import logging_config
from gpuplane.private_files import persistent_secret_key, secure_var_dir
from gpuplane.production import HSTS_SECONDS, MODES, PRODUCTION, REDIRECT_EXEMPT, check_production

BASE_DIR = Path(__file__).resolve().parent.parent
# `production` (deploy/ sets it): secure defaults, and a start refused on unsafe settings (gpuplane/production.py).
GPUPLANE_ENV = env_choice("GPUPLANE_ENV", MODES[0], MODES)
_PRODUCTION = GPUPLANE_ENV == PRODUCTION
VAR_DIR = Path(env_str("GPUPLANE_VAR_DIR", str(BASE_DIR / "var")))
# --- Safe defaults (docs/operations.md, "Configuration"; gpuplane/private_files.py) ---------------------
# var/ and everything created in it are owner-only (umask 077, 0700 directories, 0600 files).
secure_var_dir(VAR_DIR)
# DEBUG pages show settings and source: an explicit developer opt-in, never the default.
DEBUG = env_bool("DEBUG", False)
# Set SECRET_KEY to share one key between machines; else one is generated once under var/.
SECRET_KEY = env_str("SECRET_KEY", "") or persistent_secret_key(VAR_DIR / "secret-key")
# Bodies larger than this are refused with 400, also those DRF parses (gpuplane/parsers.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
# Error reports (DEBUG pages, mails to ADMINS) hide credentials in every URL (gpuplane/error_reports.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "gpuplane.error_reports.CredentialMaskingReporterFilter"
DEFAULT_EXCEPTION_REPORTER = "gpuplane.error_reports.CredentialMaskingExceptionReporter"
# --- end of safe defaults -------------------------------------------------------------------
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
# The pod's own address (downward API): Prometheus scrapes /metrics at it, as Host.
ALLOWED_HOSTS += env_list("GPUPLANE_POD_IP", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",  # API tokens stored as digests, with an expiry (gpuplane/tokens.py)
    "django_filters",
    "drf_spectacular",
    "gpuplane",
    "lifecycle",
    "nodes",
    "scheduler",
    "rollouts",
    "savings",
    "consolidation",
]

MIDDLEWARE = [
    # /healthz first: the kubelet's probes come with the pod's IP as Host, over http (gpuplane/health.py).
    "gpuplane.health.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "gpuplane.accounts.ActorMiddleware",  # account audit events name who made the change
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "gpuplane.path_parameters.PathParameterMiddleware",  # NUL in a path parameter: 400, not a 500
]

ROOT_URLCONF = "gpuplane.urls"
WSGI_APPLICATION = "gpuplane.wsgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "gpuplane.roles.role_context",
            ],
        },
    },
]

DATABASES = databases(VAR_DIR)  # gpuplane/database_settings.py

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = "gpuplane.formats"  # dates as 2026-11-27 07:19 UTC, not "7:19 a.m." (gpuplane/formats/)

STATIC_URL = "static/"
# Hashed, compressed copies (gpuplane/staticfiles.py): `collectstatic` writes them here (the image
# at build time, `make run` before it starts), whitenoise serves them with a year's cache.
STATIC_ROOT = Path(env_str("GPUPLANE_STATIC_ROOT", str(VAR_DIR / "staticfiles")))
STATIC_ROOT.mkdir(exist_ok=True)  # else whitenoise warns on every start before the first collect
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "gpuplane.staticfiles.CompressedManifestStorage"},
}
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "gpuplane.staticfiles.PlotlyFinder",  # /static/vendor/plotly/plotly.min.js from the plotly package
]
# Brotli quality of the collected copies, 0-11 (gpuplane/staticfiles.py: the image builds with 11).
STATIC_BROTLI_QUALITY = env_int("GPUPLANE_STATIC_BROTLI_QUALITY", 9, minimum=0)
# Outside production the originals are served too, so a page works before collectstatic has run.
WHITENOISE_USE_FINDERS = not _PRODUCTION
# Files served at the site root, for clients that ask without reading the page (/favicon.ico).
WHITENOISE_ROOT = BASE_DIR / "webroot"
WHITENOISE_AUTOREFRESH = DEBUG

# Everyone signs in here; /admin/login/ still works for staff (Django admin admits staff only).
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

INSTALLED_APPS.append("drf_spectacular_sidecar")

# --- Cluster ------------------------------------------------------------------------------
GPUPLANE_CLUSTER = env_choice("GPUPLANE_CLUSTER", "simulated", ("simulated", "kubernetes"))
# The simulated cluster's state file (so web, worker and beat see one cluster) and delays over its defaults.
GPUPLANE_SIMULATED_STATE = env_str("GPUPLANE_SIMULATED_STATE", str(VAR_DIR / "simulated-cluster.json"))
GPUPLANE_SIMULATED_DELAYS: dict[str, float] = {}  # pod_ready_delay_s, mig_reconfigure_s, plugin_restart_s
# kubeconfig path for GPUPLANE_CLUSTER=kubernetes outside a cluster; empty = in-cluster, then default.
GPUPLANE_KUBECONFIG = env_str("GPUPLANE_KUBECONFIG", "")
# Where the NVIDIA device plugin DaemonSet runs (the GPU operator's namespace by default).
GPUPLANE_DEVICE_PLUGIN_NAMESPACE = env_str("GPUPLANE_DEVICE_PLUGIN_NAMESPACE", "gpu-operator")
# Node agents prove their node with a projected token of this ServiceAccount of gpuplane's namespace,
# issued for this audience, checked by the TokenReview API (nodes/agent_identity.py); a review is
# trusted for GPUPLANE_AGENT_REVIEW_TTL_S (Kubernetes' own webhook token cache: 2 minutes).
GPUPLANE_NAMESPACE = env_str("GPUPLANE_NAMESPACE", "gpuplane")
GPUPLANE_AGENT_SERVICE_ACCOUNT = env_str("GPUPLANE_AGENT_SERVICE_ACCOUNT", "gpuplane-agent")
GPUPLANE_AGENT_TOKEN_AUDIENCE = env_str("GPUPLANE_AGENT_TOKEN_AUDIENCE", "gpuplane")
GPUPLANE_AGENT_REVIEW_TTL_S = env_int("GPUPLANE_AGENT_REVIEW_TTL_S", 120, minimum=0)

# --- Cache (locks such as the sync overlap guard must be seen by every worker process) --------
REDIS_URL = env_str("REDIS_URL", "")
# Put before every key gpuplane writes to Redis (caches and broker): two installations can share one Redis.
REDIS_KEY_PREFIX = env_str("GPUPLANE_REDIS_KEY_PREFIX", "")


def _cache(key_prefix: str, folder: str) -> dict[str, Any]:
    """Redis when REDIS_URL is set (shared by every process), else files under var/ (one machine)."""
    if REDIS_URL:
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                "KEY_PREFIX": REDIS_KEY_PREFIX + key_prefix}
    return {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(VAR_DIR / folder)}


CACHES = {
    "default": _cache("", "cache"),
    # Sign-in and token rate limit counters (gpuplane/ratelimits.py). The file cache's increments
    # are not atomic, so a burst of concurrent guesses may slip a few past the limit: use Redis.
    "ratelimit": _cache("gpuplane-ratelimit", "ratelimit-cache"),
    # The fleet pages' and /metrics' figures, kept for one telemetry poll interval (nodes/fleet.py),
    # shared by every web worker so a fleet is summarised once per interval, not once per worker.
    "fleet": _cache("gpuplane-fleet", "fleet-cache"),
}
# --- Sign-in and API tokens: rate limits and token lifetime (gpuplane/ratelimits.py, gpuplane/tokens.py) ---
RATELIMIT_USE_CACHE = "ratelimit"
# Behind a reverse proxy every request comes from the proxy: name the header it sets with the
# client's address (e.g. X-Forwarded-For; its last entry is used). Empty: REMOTE_ADDR.
GPUPLANE_CLIENT_IP_HEADER = env_str("GPUPLANE_CLIENT_IP_HEADER", "")
# Sliding windows; over a limit: 429 with Retry-After. Per client address: sign-in attempts
# (POSTs to /accounts/login/ and /admin/login/ together) and token requests (POST /api/v1/auth/token/).
GPUPLANE_LOGIN_RATE = env_rate("GPUPLANE_LOGIN_RATE", "10/m")
GPUPLANE_TOKEN_RATE = env_rate("GPUPLANE_TOKEN_RATE", "10/m")
# Per account, from any address: failed sign-ins on the pages and the token endpoint together.
GPUPLANE_ACCOUNT_SIGN_IN_RATE = env_rate("GPUPLANE_ACCOUNT_SIGN_IN_RATE", "5/5m")
# API tokens expire this many hours after they are issued; ask for a new one with the password.
GPUPLANE_API_TOKEN_TTL_H = env_int("GPUPLANE_API_TOKEN_TTL_H", 720, minimum=1)
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=GPUPLANE_API_TOKEN_TTL_H),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}

# --- Celery -------------------------------------------------------------------------------
# Every task's soft and hard time limits are at most these (most set shorter ones of their own).
CELERY_TASK_SOFT_TIME_LIMIT = 300
CELERY_TASK_TIME_LIMIT = 360
# The tasks that are idempotent (safe to run again from the start after a run died part-way)
# acknowledge their message only when they finish (acks_late) and give it back when their worker
# dies (reject_on_worker_lost): see each task's docstring. With acks_late a worker fetches one
# message at a time, so a long task never holds others back unstarted.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis hands a message a worker fetched but has not acknowledged to another worker after this
# many seconds. With acks_late that is every message whose task is still running, or waiting for
# its retry countdown, so it must be longer than the longest task (CELERY_TASK_TIME_LIMIT) plus
# the longest countdown (a watch retry, DEPLOYMENT_WATCH_INTERVAL_S), or a long task would run
# twice at once. The embedded broker has no such timeout.
CELERY_BROKER_VISIBILITY_TIMEOUT_S = env_int("GPUPLANE_CELERY_VISIBILITY_TIMEOUT_S", 3600,
                                             minimum=CELERY_TASK_TIME_LIMIT + 60)
CELERY_BROKER_DIR = VAR_DIR / "celery-broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT_S}
    if REDIS_KEY_PREFIX:
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = REDIS_KEY_PREFIX
else:
    # Embedded broker: kombu's filesystem transport, with whole-file writes (gpuplane/broker.py).
    for sub in ("queue", "processed", "control"):
        (CELERY_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    # "localhost" only silences kombu's "no hostname" warning; the transport ignores it.
    CELERY_BROKER_URL = "filesystem://localhost//"
    CELERY_BROKER_TRANSPORT = "gpuplane.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        "processed_folder": str(CELERY_BROKER_DIR / "processed"),
        "store_processed": False,
        # Fanout exchanges (worker remote control, mingle) live here; kombu's default is a
        # "control" folder in the current directory.
        "control_folder": str(CELERY_BROKER_DIR / "control"),
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULER = "gpuplane.celery:LivenessScheduler"  # beat's own, plus the liveness file
INVENTORY_SYNC_INTERVAL_S = env_int("GPUPLANE_INVENTORY_SYNC_INTERVAL_S", 30, minimum=5)
# --- Telemetry (docs/design.md section 8) ---------------------------------------------------------
# Where poll_metrics_task reads GPU metrics: simulator, DCGM via Prometheus, none (agents push to the API).
GPUPLANE_TELEMETRY_SOURCE = env_choice(
    "GPUPLANE_TELEMETRY_SOURCE", "simulated" if GPUPLANE_CLUSTER == "simulated" else "none", ("simulated", "dcgm", "none")
)
# Empty: the database is the time-series store; set: Prometheus is (nodes/telemetry/prometheus.py).
GPUPLANE_PROMETHEUS_URL = env_str("GPUPLANE_PROMETHEUS_URL", "")
TELEMETRY_POLL_INTERVAL_S = env_int("GPUPLANE_TELEMETRY_POLL_INTERVAL_S", 30, minimum=1)
TELEMETRY_RAW_RETENTION_H = env_int("GPUPLANE_TELEMETRY_RAW_RETENTION_H", 24, minimum=1)
TELEMETRY_ROLLUP_BUCKET_S = env_int("GPUPLANE_TELEMETRY_ROLLUP_BUCKET_S", 300, minimum=60)
TELEMETRY_ROLLUP_RETENTION_D = env_int("GPUPLANE_TELEMETRY_ROLLUP_RETENTION_D", 30, minimum=1)
TELEMETRY_MAX_BATCH = env_int("GPUPLANE_TELEMETRY_MAX_BATCH", 5000, minimum=1)
# The server's poll stores this many nodes per transaction (nodes.telemetry.poll): 250 nodes of
# 8 GPUs are 2,000 samples. TELEMETRY_MAX_BATCH bounds API requests only, never the poll.
TELEMETRY_POLL_SHARD_NODES = env_int("GPUPLANE_TELEMETRY_POLL_SHARD_NODES", 250, minimum=1)
# A sample stamped further in the future than this is refused (clock skew allowance).
TELEMETRY_MAX_FUTURE_SKEW_S = env_int("GPUPLANE_TELEMETRY_MAX_FUTURE_SKEW_S", 120, minimum=0)
TELEMETRY_SIMULATION_SEED = env_int("GPUPLANE_TELEMETRY_SIMULATION_SEED", 42)
# Idle GPU (seed 004): utilization below this % and memory used below this % of total.
IDLE_UTILIZATION_PCT = env_int("GPUPLANE_IDLE_UTILIZATION_PCT", 30, minimum=0)
IDLE_MEMORY_PCT = env_int("GPUPLANE_IDLE_MEMORY_PCT", 50, minimum=0)
# Bearer token Prometheus must send to GET /metrics; empty = /metrics is open (gpuplane/observability.py).
GPUPLANE_METRICS_TOKEN = env_str("GPUPLANE_METRICS_TOKEN", "")
# Per-GPU series on /metrics (utilization, memory, power, temperature, telemetry age). Off: a fleet
# of 40,000 GPUs would be 200,000 series per scrape, and NVIDIA's DCGM exporter already exports them.
GPUPLANE_METRICS_PER_GPU = env_bool("GPUPLANE_METRICS_PER_GPU", False)

# --- Placement (docs/design.md section 3; scheduler/services.py) ---------------------------------
# The scheduling profile deploys use: "balanced" (the seed's weights) or "packing", or one of
# SCHEDULER_PROFILES, which adds or overrides profiles as data (scheduler/core/profiles.py shape).
GPUPLANE_SCHEDULER_PROFILE = env_str("GPUPLANE_SCHEDULER_PROFILE", "balanced")
SCHEDULER_PROFILES: dict[str, dict] = {}
# Classification thresholds over the defaults (ClassificationSettings.from_dict keys, MiB and ms),
# e.g. {"tiny_below_mib": 4096, "large_above_mib": 16384, "latency_override_ms": 100}.
SCHEDULER_CLASSIFICATION: dict = {}
# A stored decision keeps this many best-scored nodes (plus counts of rejected nodes per reason).
DECISION_MATRIX_TOP_K = env_int("GPUPLANE_DECISION_MATRIX_TOP_K", 50, minimum=1)
# Web workers refresh their placement snapshot this often between deploys (0: only in a deploy).
SNAPSHOT_WARM_INTERVAL_S = env_int("GPUPLANE_SNAPSHOT_WARM_INTERVAL_S", 5, minimum=0)
# The observed workload mix (typical pods and sharing plan of the packing plugins,
# scheduler/services/workload_mix.py): recomputed by beat this often from the live placements
# and those made in the last WORKLOAD_MIX_WINDOW_S; deploys read it from the cache.
WORKLOAD_MIX_INTERVAL_S = env_int("GPUPLANE_WORKLOAD_MIX_INTERVAL_S", 60, minimum=5)
WORKLOAD_MIX_WINDOW_S = env_int("GPUPLANE_WORKLOAD_MIX_WINDOW_S", 86400, minimum=0)
DEPLOYMENT_MAX_REPLICAS = env_int("GPUPLANE_DEPLOYMENT_MAX_REPLICAS", 32, minimum=1)
# A deployment whose workloads are not all ready this long after creation is failed and released.
DEPLOYMENT_WATCH_TIMEOUT_S = env_int("GPUPLANE_DEPLOYMENT_WATCH_TIMEOUT_S", 600, minimum=10)
DEPLOYMENT_WATCH_INTERVAL_S = env_int("GPUPLANE_DEPLOYMENT_WATCH_INTERVAL_S", 5, minimum=1)
# A webhook-placed pod's partition is released this long after admission if no pod of it binds.
GPUPLANE_WEBHOOK_BIND_TIMEOUT_S = env_int("GPUPLANE_WEBHOOK_BIND_TIMEOUT_S", 120, minimum=10)
# Container image of the workloads gpuplane creates; it reads the model name from MODEL_NAME.
GPUPLANE_WORKLOAD_IMAGE = env_str("GPUPLANE_WORKLOAD_IMAGE", "vllm/vllm-openai:latest")

# Rolling updates (docs/design.md section 5): the reconciler's interval, how long one node step (pre-warm,
# proof) may take before the node is failed and restored, the wait after an eviction's 429 (a PDB).
ROLLOUT_RECONCILE_INTERVAL_S = env_int("GPUPLANE_ROLLOUT_RECONCILE_INTERVAL_S", 5, minimum=1)
ROLLOUT_STEP_TIMEOUT_S = env_int("GPUPLANE_ROLLOUT_STEP_TIMEOUT_S", 600, minimum=10)
ROLLOUT_EVICTION_BACKOFF_S = env_int("GPUPLANE_ROLLOUT_EVICTION_BACKOFF_S", 10, minimum=1)
# A created rollout owns its nodes until it ends; one not started in this many seconds expires (rollouts.expiry).
ROLLOUT_START_DEADLINE_S = env_int("GPUPLANE_ROLLOUT_START_DEADLINE_S", 86400, minimum=60)

# --- Savings (docs/design.md section 6; savings/) --------------------------------------------------
# Price of one GPU-hour per catalog model in USD, over nodes.gpu_costs.DEFAULT_GPU_PRICE_USD_PER_HOUR,
# e.g. GPUPLANE_GPU_PRICE_USD_PER_HOUR='{"H100-SXM5-80GB": 6.5, "L4": 0.7}'. Power is the catalog's board power.
GPU_PRICE_USD_PER_HOUR = env_number_map("GPUPLANE_GPU_PRICE_USD_PER_HOUR")
# How often a savings sample is recorded, and how long samples are kept (as the telemetry rollups).
SAVINGS_SAMPLE_INTERVAL_S = env_int("GPUPLANE_SAVINGS_SAMPLE_INTERVAL_S", 300, minimum=10)
SAVINGS_RETENTION_D = env_int("GPUPLANE_SAVINGS_RETENTION_D", 30, minimum=1)
# Consolidation (docs/design.md section 6): how often the analysis runs, how long a proposed plan may
# wait for an admin, whether plans are approved automatically (off: an admin decides), the
# re-placement policy, how many replicas of one deployment a plan may move (its disruption
# budget), the executor's tick and how long a move may take. GPU prices: GPU_PRICE_USD_PER_HOUR above.
CONSOLIDATION_INTERVAL_S = env_int("GPUPLANE_CONSOLIDATION_INTERVAL_S", 300, minimum=10)
CONSOLIDATION_PLAN_TTL_S = env_int("GPUPLANE_CONSOLIDATION_PLAN_TTL_S", 1800, minimum=60)
AUTO_CONSOLIDATE = env_bool("GPUPLANE_AUTO_CONSOLIDATE", False)
CONSOLIDATION_POLICY = env_choice("GPUPLANE_CONSOLIDATION_POLICY", "bestfit", ("bestfit", "firstfit", "worstfit"))
CONSOLIDATION_MOVES_PER_DEPLOYMENT = env_int("GPUPLANE_CONSOLIDATION_MOVES_PER_DEPLOYMENT", 1, minimum=0)
CONSOLIDATION_EXECUTE_INTERVAL_S = env_int("GPUPLANE_CONSOLIDATION_EXECUTE_INTERVAL_S", 5, minimum=1)
CONSOLIDATION_MOVE_TIMEOUT_S = env_int("GPUPLANE_CONSOLIDATION_MOVE_TIMEOUT_S", 600, minimum=10)

CELERY_BEAT_SCHEDULE = {
    **MOVE_BEAT,
    **AUTOSCALE_BEAT,
    "analyse-consolidation": {
        "task": "consolidation.tasks.analyse_consolidation_task",
        "schedule": float(CONSOLIDATION_INTERVAL_S),
        "options": {"expires": CONSOLIDATION_INTERVAL_S * 0.9},
    },
    "execute-consolidations": {
        "task": "consolidation.tasks.execute_consolidations_task",
        "schedule": float(CONSOLIDATION_EXECUTE_INTERVAL_S),
        "options": {"expires": CONSOLIDATION_EXECUTE_INTERVAL_S * 0.9},
    },
    "reconcile-rollouts": {
        "task": "rollouts.tasks.reconcile_rollouts_task",
        "schedule": float(ROLLOUT_RECONCILE_INTERVAL_S),
        "options": {"expires": ROLLOUT_RECONCILE_INTERVAL_S * 0.9},
    },
    "sync-inventory": {
        "task": "nodes.tasks.sync_inventory_task",
        "schedule": float(INVENTORY_SYNC_INTERVAL_S),
        # A sync that has not started before the next one is due is pointless.
        "options": {"expires": INVENTORY_SYNC_INTERVAL_S * 0.9},
    },
    "poll-metrics": {
        "task": "nodes.tasks.poll_metrics_task",
        "schedule": float(TELEMETRY_POLL_INTERVAL_S),
        "options": {"expires": TELEMETRY_POLL_INTERVAL_S * 0.9},
    },
    "rollup-telemetry": {
        "task": "nodes.tasks.rollup_telemetry_task",
        "schedule": 300.0,
        "options": {"expires": 270.0},
    },
    # The watch task's safety net: deployments whose watch was never enqueued or gave up.
    "sweep-deployments": {
        "task": "scheduler.tasks.sweep_deployments_task",
        "schedule": 30.0,
        "options": {"expires": 27.0},
    },
    "refresh-workload-mix": {
        "task": "scheduler.tasks.refresh_workload_mix_task",
        "schedule": float(WORKLOAD_MIX_INTERVAL_S),
        "options": {"expires": WORKLOAD_MIX_INTERVAL_S * 0.9},
    },
    "record-savings": {
        "task": "savings.tasks.record_savings_task",
        "schedule": float(SAVINGS_SAMPLE_INTERVAL_S),
        "options": {"expires": SAVINGS_SAMPLE_INTERVAL_S * 0.9},
    },
}
# --- HTTPS (docs/install.md): on by default in production, off for `make run` over plain http.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _PRODUCTION)
SECURE_REDIRECT_EXEMPT = REDIRECT_EXEMPT
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", HSTS_SECONDS if _PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", _PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", _PRODUCTION)
# Behind a TLS proxy: the header it sets, e.g. `X-Forwarded-Proto: https` (only if it always sets or strips it).
SECURE_PROXY_SSL_HEADER = env_header_pair("SECURE_PROXY_SSL_HEADER")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# One JSON object per line on standard output in production, for the cluster's log collector.
LOGGING = logging_config(level=env_str("LOG_LEVEL", "INFO"), json_lines=_PRODUCTION)
# Celery keeps Django's logging (JSON included) instead of installing its own handlers.
CELERY_WORKER_HIJACK_ROOT_LOGGER = not _PRODUCTION

if _PRODUCTION:
    check_production(globals())
