# gpuplane: one image for the web server, the admission webhook, Celery worker and beat, the
# migration Job and the node agent; deploy/image/entrypoint picks the process by its first
# argument (`web` by default). deploy/ runs it on Kubernetes; docs/install.md says how.
#
#   docker build -t gpuplane:dev .
#
# Two stages: the build stage installs requirements.txt (runtime only: no test or lint tool) into
# a virtualenv and collects the static files; the runtime stage copies the result onto a clean
# base, with no pip, no compiler and no package cache, and runs as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
RUN python -m venv /opt/venv
COPY requirements.txt ./
RUN /opt/venv/bin/pip install --require-virtualenv -r requirements.txt \
    && /opt/venv/bin/pip uninstall --yes pip \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib
COPY manage.py ./
COPY gpuplane ./gpuplane
COPY nodes ./nodes
COPY scheduler ./scheduler
COPY lifecycle ./lifecycle
COPY rollouts ./rollouts
COPY savings ./savings
COPY consolidation ./consolidation
COPY templates ./templates
COPY static ./static
COPY webroot ./webroot
COPY deploy/image/entrypoint ./deploy/image/entrypoint
# Hashed names with .br and .gz beside them, brotli at its best (served with a year's cache).
# settings.py makes everything it creates owner-only (umask 077): readable by all here, since
# the runtime user is not the one collecting.
RUN GPUPLANE_VAR_DIR=/tmp/collect-var GPUPLANE_STATIC_ROOT=/app/staticfiles GPUPLANE_STATIC_BROTLI_QUALITY=11 \
        /opt/venv/bin/python manage.py collectstatic --noinput --verbosity 0 \
    && rm -rf /tmp/collect-var \
    && /opt/venv/bin/python -m compileall -q /app \
    && chmod -R a+rX,go-w /app

FROM ${PYTHON_IMAGE} AS runtime
# The base image's own pip and setuptools are build tools too.
RUN python -m pip uninstall --yes --root-user-action=ignore pip setuptools wheel \
    && groupadd --system --gid 10001 gpuplane \
    && useradd --system --uid 10001 --gid gpuplane --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin gpuplane \
    && install --directory --owner=gpuplane --group=gpuplane --mode=0700 /var/lib/gpuplane
COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=gpuplane.settings \
    GPUPLANE_ENV=production \
    GPUPLANE_VAR_DIR=/var/lib/gpuplane \
    GPUPLANE_STATIC_ROOT=/app/staticfiles
WORKDIR /app
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8000 8443
# web: GET /healthz; worker and beat: their liveness file; others: alive while running.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["python", "-m", "gpuplane.liveness"]
ENTRYPOINT ["/app/deploy/image/entrypoint"]
CMD ["web"]
