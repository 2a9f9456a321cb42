# Result ids are unique per tenant at most (order ids now are), so the one
# live operation per result is counted per tenant too.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('operations', '0003_republish_at'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='operation',
            name='operation_one_live_per_result',
        ),
        migrations.AlterField(
            model_name='operation',
            name='result_id',
            field=models.CharField(max_length=68),
        ),
        migrations.AddConstraint(
            model_name='operation',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['processing', 'succeeded'])), fields=('tenant', 'kind', 'result_id'), name='operation_one_live_per_result'),
        ),
    ]
