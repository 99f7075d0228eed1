"""Test doubles and data builders shared by the tests and bench/ (never shipped: the package is
only `console` and `workers`): a local OpenAI-compatible streaming server and a synthetic finished
experiment."""
