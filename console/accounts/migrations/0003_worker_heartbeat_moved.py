"""WorkerHeartbeat leaves accounts's state: it lives in ``console.experiments`` now
(``experiments.0008_worker_heartbeat``), on the same table. State only: nothing in the database
changes."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_api_token_expiry_and_revocation'),
        ('experiments', '0008_worker_heartbeat'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='WorkerHeartbeat'),
            ],
            database_operations=[],
        ),
    ]
