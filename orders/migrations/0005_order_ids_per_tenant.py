# Order ids become unique per tenant, so that clients may choose them
# (PUT /v1/orders/{id}). The old primary key keeps its values and its
# references from lines and payments under a new name, internal_id; the
# public id is a new column, copied from it for the orders that exist.

from django.db import migrations, models


def copy_ids(apps, schema_editor):
    Order = apps.get_model('orders', 'Order')
    Order.objects.update(id=models.F('internal_id'))


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('orders', '0004_simulator_tables_move_to_provider'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='order',
            name='order_tenant_newest',
        ),
        migrations.RenameField(
            model_name='order',
            old_name='id',
            new_name='internal_id',
        ),
        migrations.AddField(
            model_name='order',
            name='id',
            field=models.CharField(max_length=68, null=True),
        ),
        migrations.RunPython(copy_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='order',
            name='id',
            field=models.CharField(max_length=68),
        ),
        migrations.AddConstraint(
            model_name='order',
            constraint=models.UniqueConstraint(fields=('id', 'tenant'), name='order_id_unique_per_tenant'),
        ),
        migrations.AddIndex(
            model_name='order',
            index=models.Index(fields=['tenant', '-created_at', '-id'], name='order_tenant_newest'),
        ),
    ]
