from django.apps import AppConfig

from console.experiments import hooks


class ResultsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "console.results"
    label = "results"

    def ready(self) -> None:
        # seam: the run lifecycle (console.experiments, below) discards a run's results and
        # announces a finished run through its hooks; the services need the models loaded.
        from console.results.services import results_clear, results_pack_store

        hooks.results_discard_register(results_clear)
        hooks.run_finished_register(results_pack_store, failure="could not pack its results")
