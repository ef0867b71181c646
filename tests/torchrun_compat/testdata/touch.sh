#!/bin/sh
# Stand-in for PyTorch's test/distributed/launcher/bin/test_script.sh:
# each worker makes a file named by its global rank in the folder $1, after
# checking that it inherited the launcher's environment.
[ "$TEST_SENTINEL_PARENT" = FOOBAR ] || { echo "TEST_SENTINEL_PARENT not inherited" >&2; exit 2; }
: > "$1/$RANK"
