from django.apps import AppConfig

from console.experiments import hooks


class AnalysisConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "console.analysis"
    label = "analysis"

    def ready(self) -> None:
        # seam: the run lifecycle and the capacity search (console.experiments, below) reach
        # analysis through its hooks; the modules registered need the models loaded. A baseline
        # run's fit facts are cached as it finishes, so the experiment page refines its fit
        # assessment while the candidates still run (pages never compute it); a capacity step
        # is judged against its SLO here.
        from console.analysis.capacity_steps import capacity_step_outcome
        from console.analysis.services import fit_run_summarise

        hooks.capacity_outcome_register(capacity_step_outcome)
        hooks.run_finished_register(fit_run_summarise, failure="could not cache its fit facts")
