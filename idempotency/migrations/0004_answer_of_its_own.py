# The answer leaves the key's row for a row of its own (StoredAnswer), and
# the key's foreign keys lose their constraints in the database.
#
# A command used to insert its key and then update that row with the
# answer: PostgreSQL wrote the whole row twice, left a dead version of it
# for vacuum, and logged both. Now the claim inserts the key and the store
# inserts the answer, and neither row is ever updated (docs/SCALING.md).
# The constraints made every command's COMMIT look up and lock the
# principal's and the tenant's rows; Django's CASCADE still deletes a
# principal's keys, and their answers with them.
#
# The copy writes every stored answer once more, in the migration's
# transaction: on PostgreSQL 10^6 keys took 7.7 s on a 2-core machine
# (Django's start included), during which commands wait for the key table.
# Run it when traffic is low. Dropping the columns rewrites nothing: the
# rows keep the old answers' bytes until they are purged, a TTL later.

import django.db.models.deletion
from django.db import migrations, models

COPY_ANSWERS = """
INSERT INTO idempotency_storedanswer (key_id, status, body, headers)
SELECT id, response_status, response_body, response_headers
FROM idempotency_idempotencykey
WHERE response_status IS NOT NULL
"""

# Backwards: each answer goes back onto its key's row.
RESTORE_ANSWERS = """
UPDATE idempotency_idempotencykey SET
    response_status = (
        SELECT a.status FROM idempotency_storedanswer a
        WHERE a.key_id = idempotency_idempotencykey.id
    ),
    response_body = COALESCE((
        SELECT a.body FROM idempotency_storedanswer a
        WHERE a.key_id = idempotency_idempotencykey.id
    ), response_body),
    response_headers = COALESCE((
        SELECT a.headers FROM idempotency_storedanswer a
        WHERE a.key_id = idempotency_idempotencykey.id
    ), response_headers)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("idempotency", "0003_unique_leads_with_principal"),
    ]

    operations = [
        migrations.CreateModel(
            name="StoredAnswer",
            fields=[
                (
                    "key",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="answer",
                        serialize=False,
                        to="idempotency.idempotencykey",
                    ),
                ),
                ("status", models.PositiveSmallIntegerField()),
                ("body", models.BinaryField()),
                ("headers", models.JSONField(default=dict)),
            ],
        ),
        migrations.RunSQL(COPY_ANSWERS, RESTORE_ANSWERS),
        migrations.RemoveField(model_name="idempotencykey", name="response_body"),
        migrations.RemoveField(model_name="idempotencykey", name="response_headers"),
        migrations.RemoveField(model_name="idempotencykey", name="response_status"),
        migrations.AlterField(
            model_name="idempotencykey",
            name="principal",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="idempotency_keys",
                to="accounts.principal",
            ),
        ),
        migrations.AlterField(
            model_name="idempotencykey",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.tenant",
            ),
        ),
    ]
