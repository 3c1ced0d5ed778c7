#!/bin/sh
echo "lmforge: coverage reports are not supported offline (no remote_coverage_tools)." >&2
exit 1
