# The one-refund-per-order rule becomes the operations app's own, generic
# rule: one live (processing or succeeded) operation per kind and result.
# The new constraint is added before the old one goes, so the guard never
# lapses; existing rows satisfy it (a charge's result is its own payment).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('operations', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='operation',
            name='kind',
            field=models.CharField(max_length=32),
        ),
        migrations.AddConstraint(
            model_name='operation',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ['processing', 'succeeded'])), fields=('kind', 'result_id'), name='operation_one_live_per_result'),
        ),
        migrations.RemoveConstraint(
            model_name='operation',
            name='operation_one_refund_per_order',
        ),
    ]
