"""API tokens get scopes. Tokens that existed before keep doing everything their user may (all
three scopes); a token made from now on gets read and write unless sign is asked for."""

from django.db import migrations, models

import console.accounts.scopes


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0005_raw_text_access"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=models.JSONField(default=console.accounts.scopes.scopes_all),
        ),
        migrations.AlterField(
            model_name="apitoken",
            name="scopes",
            field=models.JSONField(default=console.accounts.scopes.scopes_default),
        ),
    ]
