"""WorkerHeartbeat moves here from ``console.accounts`` (it is about the workers that run runs).

A change of Django state only: the table stays ``accounts_workerheartbeat``, where accounts
0001 made it (the model's ``db_table``), so no row moves; ``accounts.0003_worker_heartbeat_moved``
then drops the model from accounts's state.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_api_token_expiry_and_revocation'),
        ('experiments', '0007_capacity_search_help_text'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='WorkerHeartbeat',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('note', models.CharField(max_length=200)),
                        ('hostname', models.CharField(max_length=200)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'db_table': 'accounts_workerheartbeat',
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
