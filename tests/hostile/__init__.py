"""Hostile clients: what a handful of cheap requests must not do to the service.

Each module takes one attack (slow clients, pathological bodies, transport
quirks, label cardinality, tampered cursors) and shows that the service
keeps serving everyone else and that no key is burned by it.
"""
