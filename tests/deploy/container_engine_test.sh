#!/usr/bin/env bash
# tests/deploy/container_engine_test.py under Debian's python3.
exec /usr/bin/python3 tests/deploy/container_engine_test.py
