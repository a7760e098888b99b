"""Tabs."""
