from django.apps import AppConfig
from django.conf import settings

from workers.engines.servers import OpenAIAccess, openai_access_register


def settings_access() -> OpenAIAccess:
    """The openai engine's servers and credentials as the settings hold them now."""
    return OpenAIAccess(
        servers=getattr(settings, "SPECREVIEW_OPENAI_SERVERS", {}) or {},
        credentials=getattr(settings, "SPECREVIEW_OPENAI_CREDENTIALS", {}) or {},
    )


class WorkersConfig(AppConfig):
    name = "workers"
    label = "workers"

    def ready(self) -> None:
        # The measurement core reads no settings: it is told where its registry comes from.
        openai_access_register(settings_access)
