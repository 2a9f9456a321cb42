# The payment provider simulator's tables now belong to the provider app
# (provider 0001 adopts them); the orders app forgets them without touching
# the database.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('orders', '0003_ledger_entry_plural'),
        ('provider', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name='ProviderAttempt'),
                migrations.DeleteModel(name='ProviderLedgerEntry'),
            ],
            database_operations=[],
        ),
    ]
