# The claim's unique index leads with the principal, and the principal's
# own index goes: every claim wrote an entry into it, and while the table
# was young the planner took it for the store's UPDATE (both estimated one
# row) and read every key of the principal. The unique index now serves a
# principal's cascade as well.
#
# Rebuilding the unique index locks the key table while it is built: on
# PostgreSQL 4 s per million keys on a 2-core machine, during which claims
# wait. Run it when traffic is low.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("idempotency", "0002_drop_tenant_index"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="idempotencykey",
            name="idempotency_key_unique_per_principal",
        ),
        migrations.AddConstraint(
            model_name="idempotencykey",
            constraint=models.UniqueConstraint(
                fields=("principal", "tenant", "key"), name="idempotency_key_unique_per_principal"
            ),
        ),
        migrations.AlterField(
            model_name="idempotencykey",
            name="principal",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="idempotency_keys",
                to="accounts.principal",
            ),
        ),
    ]
