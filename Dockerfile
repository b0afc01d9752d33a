# Pinch in a container: `docker compose up -d` (see README, "Run it with Docker").
#
# BASE defaults to the official Python image. Any Debian-based image with python3 and the venv
# module works (scripts/container-test.sh builds from a debootstrapped Debian where no registry
# is reachable).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PINCH_HOME=/data \
    PATH=/opt/pinch/venv/bin:$PATH

# A non-root user owns the data volume; the code is root-owned and read-only for it.
RUN useradd --uid 10001 --user-group --create-home --home-dir /home/pinch --shell /usr/sbin/nologin pinch \
    && mkdir -p /data && chown pinch:pinch /data && chmod 0700 /data

WORKDIR /opt/pinch
# Dependencies first (exact versions, hash-checked; the runtime subset of requirements.lock,
# without the test and lint tools), so code changes don't reinstall them.
COPY requirements-runtime.lock pyproject.toml README.md ./
RUN python3 -m venv /opt/pinch/venv \
    && /opt/pinch/venv/bin/pip install --no-cache-dir --require-hashes -r requirements-runtime.lock
COPY app ./app
COPY agent ./agent
COPY channels ./channels
COPY memory ./memory
COPY common ./common
COPY workspace_template ./workspace_template
COPY docker/entrypoint.sh /usr/local/bin/pinch-entrypoint
RUN /opt/pinch/venv/bin/pip install --no-cache-dir --no-deps -e . \
    && chmod 0755 /usr/local/bin/pinch-entrypoint \
    && /opt/pinch/venv/bin/python -c "import app.cli.main, channels.base, memory.store.db"

USER pinch
VOLUME ["/data"]
# Liveness: the gateway writes a heartbeat (channels included) every 15 s; older than 90 s
# (or a channel unhealthy) fails the check.
HEALTHCHECK --interval=60s --timeout=10s --start-period=120s --retries=3 \
    CMD ["pinch", "doctor", "--health"]
ENTRYPOINT ["pinch-entrypoint"]
CMD ["pinch", "gateway"]
