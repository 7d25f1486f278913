#!/bin/sh
# exactgelu.sh runs the gemma checks against llama.cpp with ggml's CPU
# GELU computed by its tanh formula instead of its F16 table.
#
# No flag turns the table off: ggml/src/ggml-cpu/vec.h, as the pinned
# ollama module vendors it, defines GGML_GELU_FP16 unconditionally at its
# line 17 (a -U on the command line comes before it), and Go refuses an
# -overlay of a file in the module cache. So this copies the module out of
# the cache, removes that one line from the copy, and builds the refcheck
# against the copy through a temporary go.mod (-modfile) that replaces the
# module with it. The first run compiles ggml and llama.cpp again (many
# minutes); EXACTGELU_DIR (default /tmp/strata-exactgelu) keeps the copy
# where Go's build cache finds it next time.
#
#   engine/internal/refcheck/exactgelu.sh [go test flags]
set -eu
cd "$(dirname "$0")"
work=${EXACTGELU_DIR:-/tmp/strata-exactgelu}
src=$(go list -m -f '{{.Dir}}' github.com/ollama/ollama)
mkdir -p "$work"
rm -rf "$work/ollama"
cp -R "$src" "$work/ollama"
chmod -R u+w "$work/ollama"
vec="$work/ollama/ml/backend/ggml/ggml/src/ggml-cpu/vec.h"
if [ "$(sed -n 17p "$vec")" != "#define GGML_GELU_FP16" ]; then
	echo "exactgelu.sh: $src/ml/backend/ggml/ggml/src/ggml-cpu/vec.h line 17 is not '#define GGML_GELU_FP16'" >&2
	exit 1
fi
sed -i '17s|.*|/* GGML_GELU_FP16 left undefined (exactgelu.sh): GELU by its formula */|' "$vec"
cp go.mod "$work/refcheck.mod"
cp go.sum "$work/refcheck.sum"
echo "replace github.com/ollama/ollama => $work/ollama" >>"$work/refcheck.mod"
exec go test -modfile "$work/refcheck.mod" -count=1 -run "${RUN:-GELUTableProbe|GemmaExactGELULlamaCpp}" -v . "$@"
