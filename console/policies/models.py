"""Filled by a later issue."""
