"""Tests of the shared server bootstrap (services/common)."""
