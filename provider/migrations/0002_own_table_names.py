# The adopted tables take the provider app's names (a rename: no data moves).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('provider', '0001_initial'),
        # The orders app has let go of them first.
        ('orders', '0004_simulator_tables_move_to_provider'),
    ]

    operations = [
        migrations.AlterModelTable(name='attempt', table=None),
        migrations.AlterModelTable(name='ledgerentry', table=None),
    ]
