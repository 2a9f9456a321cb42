-- The least an idempotent first execution of POST /v1/orders must ask of
-- PostgreSQL: read the bearer token, claim the key under its unique
-- constraint, read the catalog, insert the order, its line and its event,
-- store the answer, commit. Run by pgbench (tests/bench/ceiling.py) with
-- -D principal=… -D tenant=… -D digest=…; what a create does beyond it is
-- in docs/SCALING.md ("The ceiling"). Rows of the bench's sizes: an answer
-- of 471 bytes, an event's data of 352.
\set k random(1, 9000000000000000000)
SELECT t.id, t.principal_id, t.prefix, t.created_at, p.id, p.name, p.created_at, p.tenant_id,
       n.id, n.slug, n.created_at
  FROM accounts_apitoken t
  JOIN accounts_principal p ON p.id = t.principal_id
  JOIN accounts_tenant n ON n.id = p.tenant_id
 WHERE t.digest = ':digest' AND t.revoked_at IS NULL;
BEGIN;
INSERT INTO idempotency_idempotencykey
  (key, request_method, request_path, fingerprint, field_digests, created_at, expires_at, principal_id, tenant_id)
  VALUES ('ceiling-:client_id-:k', 'POST', '/v1/orders',
          '9b2c5d0e61f4a8b7c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0',
          '{"/items": "52988ebe165b29b6", "/items/0": "c45bf815ea49f1a9", "/currency": "dfe56e1b085f77d8", "/customerId": "f356e39edc8d7a5d", "/items/0/qty": "59f7b34144c0da5d", "/items/0/sku": "031e24799cb35456"}',
          now(), now() + interval '1 day', :principal, :tenant)
  ON CONFLICT (principal_id, tenant_id, key) DO NOTHING
  RETURNING id AS key_id \gset
SELECT sku, unit_price, currency FROM orders_product WHERE sku IN ('ABC');
INSERT INTO orders_order
  (internal_id, id, tenant_id, customer_id, status, currency, total_amount, cancel_reason, created_at, updated_at)
  VALUES ('ord_c:client_id-:k', 'ord_c:client_id-:k', :tenant, 'bench', 'pending', 'RUB', 3980, '', now(), now());
INSERT INTO orders_orderitem (position, sku, qty, unit_price, line_total, order_id)
  VALUES (0, 'ABC', 2, 1990, 3980, 'ord_c:client_id-:k');
INSERT INTO events_event (id, type, resource, txid, data, created_at, tenant_id)
  VALUES ('evt_c:client_id-:k', 'order.created', '/v1/orders/ord_c:client_id-:k',
          pg_current_xact_id()::text::bigint,
          '{"id": "ord_c:client_id-:k", "items": [{"qty": 2, "sku": "ABC", "lineTotal": 3980, "unitPrice": 1990}], "links": {"self": "/v1/orders/ord_c:client_id-:k"}, "status": "pending", "currency": "RUB", "payments": [], "createdAt": "2026-12-06T11:42:48.784832Z", "updatedAt": "2026-12-06T11:42:48.784853Z", "customerId": "bench", "totalAmount": 3980}',
          now(), :tenant);
INSERT INTO idempotency_storedanswer (key_id, status, body, headers)
  VALUES (:key_id, 201,
          convert_to('{"status":"succeeded","orderId":"ord_c:client_id-:k","order":{"id":"ord_c:client_id-:k","customerId":"bench","status":"pending","currency":"RUB","totalAmount":3980,"items":[{"sku":"ABC","qty":2,"unitPrice":1990,"lineTotal":3980}],"payments":[],"createdAt":"2026-12-06T11:42:48.784832Z","updatedAt":"2026-12-06T11:42:48.784853Z","links":{"self":"/v1/orders/ord_c:client_id-:k"}},"links":{"self":"/v1/orders/ord_c:client_id-:k"}}', 'UTF8'),
          '{"Location": "/v1/orders/ord_c:client_id-:k", "Content-Type": "application/json"}');
COMMIT;
