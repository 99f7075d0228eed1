from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The top edge: the demo and ``run_experiment``, commands that drive every app and start the
    embedded worker (``workers/embedded.py``) themselves. No models."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "console.demo"
    label = "demo"
