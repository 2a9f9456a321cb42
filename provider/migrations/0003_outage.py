# The simulated provider can be made unreachable (manage.py provider_outage).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('provider', '0002_own_table_names'),
    ]

    operations = [
        migrations.CreateModel(
            name='Outage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('started_at', models.DateTimeField(auto_now_add=True)),
            ],
        ),
    ]
