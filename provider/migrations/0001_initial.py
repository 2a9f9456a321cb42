# The simulator's tables were created by the orders app (orders 0002) and
# move here unchanged: this migration adopts them into the provider app's
# state without touching the database, and orders 0004 lets go of them.

from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('orders', '0003_ledger_entry_plural'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Attempt',
                    fields=[
                        ('provider_key', models.CharField(max_length=100, primary_key=True, serialize=False)),
                        ('count', models.PositiveIntegerField(default=0)),
                    ],
                    options={
                        'db_table': 'orders_providerattempt',
                    },
                ),
                migrations.CreateModel(
                    name='LedgerEntry',
                    fields=[
                        ('charge_id', models.CharField(max_length=32, primary_key=True, serialize=False)),
                        ('kind', models.CharField(choices=[('charge', 'Charge'), ('refund', 'Refund')], max_length=8)),
                        ('provider_key', models.CharField(max_length=100, unique=True)),
                        ('payment_id', models.CharField(max_length=32)),
                        ('amount', models.PositiveBigIntegerField()),
                        ('currency', models.CharField(max_length=3)),
                        ('payment_method', models.CharField(max_length=64)),
                        ('succeeded', models.BooleanField()),
                        ('failure_code', models.CharField(blank=True, max_length=64)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                    ],
                    options={
                        'ordering': ['created_at', 'charge_id'],
                        'verbose_name_plural': 'ledger entries',
                        'db_table': 'orders_providerledgerentry',
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
