"""RequestResult, RunTelemetry, RunSummary and RunResultsPack leave analysis's state: they live in
``console.results`` now (``results.0001_initial``), on the same tables. State only: nothing in the
database changes."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('analysis', '0005_run_results_pack'),
        ('results', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='RequestResult'),
                migrations.DeleteModel(name='RunResultsPack'),
                migrations.DeleteModel(name='RunSummary'),
                migrations.DeleteModel(name='RunTelemetry'),
            ],
            database_operations=[],
        ),
    ]
