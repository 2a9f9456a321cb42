"""The domain: orders, payments and refunds through the HTTP API."""
