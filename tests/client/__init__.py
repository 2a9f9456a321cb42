"""The client package (client/): its retry policy, key stores, errors and loop, offline."""
