"""The Celery app: two run queues, one per kind of host, and one for housekeeping.

``cpu`` workers run the hf engine; ``gpu`` workers run one engine per accelerator
(``--concurrency 1``, solo or threads pool since vLLM spawns its own engine process).
``housekeeping`` carries the periodic reaper, sent by Celery beat: it has its own worker so
that it never waits behind a six-hour run. The queues, the routes and the prefetch (one
message per worker) are set in ``console/settings.py`` only (``CELERY_*``, read here).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("specreview")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_track_started = True
app.conf.broker_transport_options = {
    **(app.conf.broker_transport_options or {}),
}
app.autodiscover_tasks(["workers"])
