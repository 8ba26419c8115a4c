# syntax=docker/dockerfile:1
# The xshard image: `xshard` is the entrypoint, it runs as a non-root user (10001), data
# lives in /data. The Helm chart (helm/xshard) runs it as node, router, controller and Job.
#
#   docker build --build-arg VERSION=0.1.0 -t REGISTRY/xshard:0.1.0 .
#
# The install steps are the ones CI runs (.ci/run); tests/helm/test_image.py runs these
# RUN lines in a fresh virtualenv, so a change that breaks them fails the tests.
ARG PYTHON=3.11

FROM python:${PYTHON}-slim AS build
# A C compiler for the extensions `pip install .` builds.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/xshard
ENV PATH=/opt/xshard/bin:$PATH
WORKDIR /src
COPY . .
RUN python -m pip install -q --upgrade pip
RUN python -m pip install -q .
# The root filesystem is read-only at run time: compile the bytecode now.
RUN python -m compileall -q /opt/xshard

FROM python:${PYTHON}-slim
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="xshard" \
      org.opencontainers.image.description="A sharded, replicated Redis-Streams cluster in Python" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 xshard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /data --no-create-home \
      --shell /usr/sbin/nologin xshard \
 && mkdir /data && chown 10001:10001 /data
COPY --from=build /opt/xshard /opt/xshard
ENV PATH=/opt/xshard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /data
VOLUME ["/data"]
USER 10001:10001
# RESP (nodes, routers) and /metrics, /healthz, /readyz.
EXPOSE 6379 9121
ENTRYPOINT ["xshard"]
CMD ["--help"]
