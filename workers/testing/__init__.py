"""Test and benchmark helpers that ship with specreview (a local OpenAI-compatible server)."""
