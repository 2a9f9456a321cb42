# The sweep finds lost messages by when each operation is due to be
# published again, not by how long it made no progress. Existing processing
# operations are due at once: the first sweep after the upgrade publishes
# them, and a worker that holds one ignores the copy.

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('operations', '0002_one_live_operation_per_result'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='operation',
            name='operation_processing',
        ),
        migrations.AddField(
            model_name='operation',
            name='republish_at',
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AddIndex(
            model_name='operation',
            index=models.Index(condition=models.Q(('status', 'processing')), fields=['republish_at'], name='operation_republish'),
        ),
    ]
