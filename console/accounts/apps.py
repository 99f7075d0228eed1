from django.apps import AppConfig


class AccountsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "console.accounts"
    label = "accounts"

    def ready(self) -> None:
        from console.accounts import checks  # noqa: F401  (registers the deploy checks)
