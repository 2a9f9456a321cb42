# The sweep publishes an operation again only when its message is presumed
# lost, judged by when that message was published (published_at), no longer
# merely because it has waited OPERATION_STALE_AFTER. Every existing
# operation had at least one message; a processing one is taken as published
# at the upgrade, so that the first sweeps after it send copies only of
# messages that are gone, not of the ones still queued.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('operations', '0004_one_live_operation_per_tenant_result'),
    ]

    operations = [
        migrations.AddField(
            model_name='operation',
            name='publications',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='operation',
            name='published_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(
            "UPDATE operations_operation SET publications = 1,"
            " published_at = CASE WHEN status = 'processing' THEN CURRENT_TIMESTAMP END",
            reverse_sql=migrations.RunSQL.noop,
        ),
        migrations.AddIndex(
            model_name='operation',
            index=models.Index(condition=models.Q(('status', 'processing')), fields=['kind', 'created_at'], name='operation_processing_age'),
        ),
    ]
