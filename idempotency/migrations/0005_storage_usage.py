# The running total of what each principal's keys hold (docs/SPECIFICATION.md
# §3 rule 12; idempotency/quota.py explains its buckets).
#
# Keys stored before this migration are counted too, each principal's in one
# bucket that ends with its last key's expiry: the total errs on the side of
# refusing until those keys are gone, a TTL at most. One aggregate query over
# the keys and their answers; 10^6 keys would take seconds, during which
# nothing waits (it reads, and writes only the new table).

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Count, Max, Sum, TextField
from django.db.models.functions import Cast, Coalesce, Length


def count_stored_keys(apps, schema_editor):
    from idempotency import quota

    keys = apps.get_model("idempotency", "IdempotencyKey")
    usage = apps.get_model("idempotency", "StorageUsage")
    per_principal = (
        keys.objects.values("principal_id")
        .annotate(
            keys=Count("id"),
            last_expiry=Max("expires_at"),
            values=Sum(
                Length("key")
                + Length("request_method")
                + Length("request_path")
                + Length("fingerprint")
                + Length(Cast("field_digests", TextField()))
                + Coalesce(Length("answer__body"), 0)
                + Coalesce(Length(Cast("answer__headers", TextField())), 0)
            ),
        )
        .order_by()
    )
    usage.objects.bulk_create(
        usage(
            principal_id=row["principal_id"],
            expires_by=quota.bucket_end(row["last_expiry"]),
            shard=0,
            bytes=row["values"] + row["keys"] * quota.ROW_OVERHEAD_BYTES,
        )
        for row in per_principal
    )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("idempotency", "0004_answer_of_its_own"),
    ]

    operations = [
        migrations.CreateModel(
            name="StorageUsage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("expires_by", models.DateTimeField()),
                ("shard", models.PositiveSmallIntegerField()),
                ("bytes", models.BigIntegerField()),
                (
                    "principal",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.principal",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("principal", "expires_by", "shard"),
                        name="idempotency_storage_usage_unique",
                    )
                ],
            },
        ),
        migrations.RunPython(count_stored_keys, migrations.RunPython.noop),
    ]
