from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_roles(sender, **kwargs) -> None:
    from console.accounts.services import roles_ensure

    roles_ensure()


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "console.accounts"
    label = "accounts"

    def ready(self) -> None:
        # Groups need the permissions, which Django creates in post_migrate; so do we.
        post_migrate.connect(_ensure_roles, sender=self)
        from console.accounts import checks  # noqa: F401  (registers the deploy checks)
