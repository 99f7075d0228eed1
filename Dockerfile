FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY console console
COPY workers workers
ARG EXTRAS=""
# CPU torch for the web and CPU worker images; the GPU image sets EXTRAS=vllm and the CUDA index.
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -e ".${EXTRAS}"
COPY . .
RUN python manage.py collectstatic --noinput
EXPOSE 8000
CMD ["gunicorn", "console.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
