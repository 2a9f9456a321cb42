"""Fault injection: real processes, one real fault each, and an audit of what happened once."""
