-- The least an idempotent first execution of POST /v1/payments must ask of
-- PostgreSQL: read the bearer token, claim the key, lock the order, insert
-- the payment and the operation that will charge it, store the answer,
-- commit. Run by pgbench (tests/bench/ceiling.py) with -D principal=…
-- -D tenant=… -D digest=… -D round=… -D n=0, each client paying its own
-- unpaid orders ord_g<round>-<client>-<n>, n = 1, 2, … (made beforehand).
\set n :n + 1
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
  VALUES ('ceiling-:client_id-:k', 'POST', '/v1/payments',
          '9b2c5d0e61f4a8b7c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0',
          '{"/amount": "52988ebe165b29b6", "/orderId": "c45bf815ea49f1a9", "/currency": "dfe56e1b085f77d8", "/paymentMethod": "f356e39edc8d7a5d"}',
          now(), now() + interval '1 day', :principal, :tenant)
  ON CONFLICT (principal_id, tenant_id, key) DO NOTHING
  RETURNING id AS key_id \gset
SELECT internal_id, id, status, currency, total_amount FROM orders_order
 WHERE tenant_id = :tenant AND id = 'ord_g:round-:client_id-:n' FOR UPDATE;
INSERT INTO orders_payment
  (id, amount, currency, payment_method, status, failure_code, provider_charge_id, created_at, updated_at, order_id, tenant_id)
  VALUES ('pay_g:client_id-:k', 3980, 'RUB', 'pm_card_ok', 'processing', '', '', now(), now(),
          'ord_g:round-:client_id-:n', :tenant);
INSERT INTO operations_operation
  (id, kind, status, result_id, error_code, error_message, attempts, claimed_until, trace_id,
   created_at, updated_at, tenant_id, republish_at, publications, published_at)
  VALUES ('op_g:client_id-:k', 'payment.charge', 'processing', 'pay_g:client_id-:k', '', '', 0, NULL, '',
          now(), now(), :tenant, now() + interval '5 minutes', 1, now());
INSERT INTO idempotency_storedanswer (key_id, status, body, headers)
  VALUES (:key_id, 202,
          convert_to('{"status":"processing","paymentId":"pay_g:client_id-:k","operationId":"op_g:client_id-:k","links":{"self":"/v1/payments/pay_g:client_id-:k","operation":"/v1/operations/op_g:client_id-:k"}}', 'UTF8'),
          '{"Location": "/v1/operations/op_g:client_id-:k", "Retry-After": "1", "Content-Type": "application/json"}');
COMMIT;
