"""The API's documentation: the OpenAPI schema and the docs pages."""
