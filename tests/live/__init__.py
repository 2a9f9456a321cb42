"""The service as deployed: its own processes, its settings, its Compose file, fuzzed live."""
