class TransientFailure(Exception):
    """The work failed in a way that may pass: retry it later, unchanged."""
