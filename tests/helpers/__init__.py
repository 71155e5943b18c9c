"""Support code the test modules share; no test module imports another (tests/test_imports.py)."""
