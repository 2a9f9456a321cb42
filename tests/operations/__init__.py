"""Asynchronous operations: the outbox, the sweep, redelivery."""
