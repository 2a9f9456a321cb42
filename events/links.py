"""Where the events API's resources live: path-absolute, spelled once."""


def event_path(event_id: str) -> str:
    return f"/v1/events/{event_id}"


def webhook_endpoint_path(endpoint_id: str) -> str:
    return f"/v1/webhook-endpoints/{endpoint_id}"


def deliveries_path(endpoint_id: str) -> str:
    return f"/v1/webhook-endpoints/{endpoint_id}/deliveries"
