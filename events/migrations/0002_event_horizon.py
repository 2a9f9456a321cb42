# The index of the feed's horizon across tenants (events.metrics.feed_lag).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('events', '0001_initial'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='event',
            index=models.Index(fields=['txid', 'seq'], name='event_horizon'),
        ),
    ]
