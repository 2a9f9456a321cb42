# The index of ended operations, for their purge (operations/retention.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('operations', '0005_messages_in_flight'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='operation',
            index=models.Index(condition=models.Q(('status__in', ['succeeded', 'failed'])), fields=['updated_at'], name='operation_ended'),
        ),
    ]
