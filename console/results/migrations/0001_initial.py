"""RequestResult, RunTelemetry, RunSummary and RunResultsPack move here from the analysis app.

A change of Django state only: the tables stay where ``analysis`` migrations 0001-0005 made
them (each model's ``db_table`` keeps its ``analysis_*`` name), so no row moves and a database
migrated before the move needs nothing. ``analysis.0006_results_moved`` then drops the models
from analysis's state.
"""

import console.results.arrays
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('analysis', '0005_run_results_pack'),
        ('experiments', '0006_capacity_search'),
        ('traces', '0003_request_sessions'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='RunResultsPack',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('version', models.PositiveIntegerField(help_text='selectors.RESULTS_PACK_VERSION it was packed with')),
                        ('n_rows', models.PositiveIntegerField()),
                        ('max_result_id', models.BigIntegerField(null=True)),
                        ('data', models.BinaryField()),
                        ('created_at', models.DateTimeField(auto_now=True)),
                        ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='results_pack', to='experiments.run')),
                    ],
                    options={
                        'db_table': 'analysis_runresultspack',
                    },
                ),
                migrations.CreateModel(
                    name='RunSummary',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('version', models.PositiveIntegerField(default=1)),
                        ('data', models.JSONField(default=dict)),
                        ('computed_at', models.DateTimeField(auto_now=True)),
                        ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='summary', to='experiments.run')),
                    ],
                    options={
                        'db_table': 'analysis_runsummary',
                    },
                ),
                migrations.CreateModel(
                    name='RunTelemetry',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('peak_memory_bytes', models.BigIntegerField(null=True)),
                        ('gpu_peak_memory_bytes', models.BigIntegerField(null=True)),
                        ('mean_util', models.FloatField(null=True)),
                        ('energy_j', models.FloatField(null=True)),
                        ('cpu_time_s', models.FloatField(null=True)),
                        ('counters', models.JSONField(blank=True, default=dict, help_text='engine counter deltas over the run')),
                        ('samples', models.JSONField(blank=True, default=list, help_text='downsampled [t, memory, util, power] series')),
                        ('run', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='telemetry', to='experiments.run')),
                    ],
                    options={
                        'db_table': 'analysis_runtelemetry',
                    },
                ),
                migrations.CreateModel(
                    name='RequestResult',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('request_id', models.CharField(max_length=200)),
                        ('scheduled_s', models.FloatField()),
                        ('sent_s', models.FloatField(null=True)),
                        ('first_token_s', models.FloatField(null=True)),
                        ('finish_s', models.FloatField(null=True)),
                        ('queue_s', models.FloatField(default=0.0)),
                        ('chunk_times', console.results.arrays.PackedArrayField(help_text='seconds from run start, one per visible chunk', kind='float')),
                        ('chunk_tokens', console.results.arrays.PackedArrayField(help_text='tokens per chunk', kind='int')),
                        ('num_output_tokens', models.PositiveIntegerField(default=0)),
                        ('output_text', models.TextField(blank=True)),
                        ('output_token_ids', console.results.arrays.PackedArrayField(help_text="the output's token ids", kind='int')),
                        ('finish_reason', models.CharField(blank=True, max_length=40, null=True)),
                        ('drafted', console.results.arrays.PackedArrayField(help_text='draft tokens proposed per verification step', kind='int')),
                        ('accepted', console.results.arrays.PackedArrayField(help_text='draft tokens accepted per verification step', kind='int')),
                        ('spec_totals', models.JSONField(blank=True, default=None, help_text='a server\'s per-request spec-decode totals without its steps (vLLM summary level): {"drafts", "draft_tokens", "accepted"}', null=True)),
                        ('error', models.TextField(blank=True)),
                        ('json_valid', models.BooleanField(null=True)),
                        ('schema_valid', models.BooleanField(null=True)),
                        ('tool_call_valid', models.BooleanField(null=True)),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='results', to='experiments.run')),
                        ('trace_request', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='results', to='traces.tracerequest')),
                    ],
                    options={
                        'db_table': 'analysis_requestresult',
                        'ordering': ['run', 'scheduled_s'],
                        'constraints': [models.UniqueConstraint(fields=('run', 'request_id'), name='result_run_request_unique')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
