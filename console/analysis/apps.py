from django.apps import AppConfig


class AnalysisConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "console.analysis"
    label = "analysis"

    def ready(self) -> None:
        # seam: the run lifecycle (console.experiments, below) announces a finished run through
        # console.experiments.hooks; a baseline run's fit facts are cached then, so the experiment
        # page refines its fit assessment while the candidates still run (pages never compute it).
        from console.analysis.services import fit_run_summarise
        from console.experiments import hooks

        hooks.run_finished_register(fit_run_summarise, failure="could not cache its fit facts")
