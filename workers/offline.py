"""Model loading never reaches the Hugging Face hub: every model comes from the local cache
(the catalog, workers/catalog/). The ``workers`` package imports this module first, and every
entry point imports that package (the console package through its Celery app, so manage.py, the
web server and the worker; bench/ scripts through the engines), so the variables are set before
transformers or huggingface_hub is imported anywhere. An operator's explicit value wins."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
