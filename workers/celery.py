"""The Celery app: two queues, one per kind of host.

``cpu`` workers run the hf engine and housekeeping; ``gpu`` workers run one engine per
accelerator (``--concurrency 1 --prefetch-multiplier 1``, solo or threads pool since vLLM
spawns its own engine process).
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("specreview")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("cpu"), Queue("gpu"))
app.conf.task_default_queue = "cpu"
app.conf.worker_prefetch_multiplier = 1
app.conf.task_track_started = True
app.conf.broker_transport_options = {
    **(app.conf.broker_transport_options or {}),
}
app.autodiscover_tasks(["workers"])
