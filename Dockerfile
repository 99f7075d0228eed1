# Two stages: dependencies are built in `build`, the runtime image gets the virtualenv and only the
# application's own files (no .env, var/, database or secret key: see .dockerignore), and runs as an
# unprivileged user. Build the GPU worker image with --build-arg EXTRAS="[vllm,gpu]" --build-arg TORCH_INDEX="".
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY console console
COPY workers workers
ARG EXTRAS=""
# CPU torch for the web and CPU worker images (PyTorch's CPU index: no CUDA libraries in them).
# The GPU image sets EXTRAS="[vllm,gpu]" and TORCH_INDEX="": torch then comes from PyPI, whose Linux
# wheels are the CUDA build that vLLM and the hf engine on CUDA need.
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
RUN python -m venv /venv \
 && /venv/bin/pip install ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"} -e ".${EXTRAS}"

FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 \
    PATH=/venv/bin:$PATH SPECREVIEW_VAR_DIR=/var/lib/specreview SPECREVIEW_MODEL_CACHE=/models
RUN groupadd --system --gid 10001 specreview \
 && useradd --system --uid 10001 --gid specreview --create-home --home-dir /home/specreview \
      --shell /usr/sbin/nologin specreview
COPY --from=build /venv /venv
WORKDIR /app
# The editable install in /venv points at /app: the same path here. Files stay root-owned, read-only to the app.
COPY pyproject.toml README.md manage.py ./
COPY console console
COPY workers workers
COPY templates templates
COPY static static
# Static files are collected at build time with a throwaway key that no running container uses.
RUN SECRET_KEY=collectstatic-at-build-time-only python manage.py collectstatic --noinput \
 && rm -rf /var/lib/specreview/broker /var/lib/specreview/secret_key \
 && mkdir -p /models \
 && chown specreview:specreview /var/lib/specreview /models
ENV SPECREVIEW_ENV=production
USER specreview:specreview
EXPOSE 8000
CMD ["gunicorn", "console.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--timeout", "120"]
