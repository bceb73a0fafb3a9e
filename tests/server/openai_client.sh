#!/bin/sh
# The openai npm client against strata serve (tests/server/node), under Node's test runner.
# Skips (exit 77, ctest's SKIP_RETURN_CODE) without node, without the client installed
# (scripts/deps.sh installs it from the lock file), or without ../shared's stories260K.
set -eu
src=$1
shared=${STRATA_SHARED:-$src/../shared}
dir=$src/tests/server/node
command -v node >/dev/null || { echo "SKIPPED: no node"; exit 77; }
[ -d "$dir/node_modules/openai" ] || { echo "SKIPPED: $dir/node_modules/openai missing (npm ci there)"; exit 77; }
[ -f "$shared/models/stories260K.gguf" ] || { echo "SKIPPED: $shared/models/stories260K.gguf missing"; exit 77; }
STRATA_SHARED=$shared exec node --test --test-reporter=spec "$dir/openai.test.mjs"
