#!/bin/sh
# What each install costs: a fresh venv per row, `pip install` of the committed tree, `du -sh`.
#   sh benchmarks/venv_sizes.sh [WORKDIR]      (default /tmp/engine-venv-sizes; needs the registries)
set -eu
WORK=${1:-/tmp/engine-venv-sizes}
SRC=$WORK/src
rm -rf "$WORK" && mkdir -p "$SRC"
git -C "$(dirname "$0")/.." archive HEAD | tar -x -C "$SRC"
python3 -m venv "$WORK/empty"
echo "empty venv: $(du -sh "$WORK/empty" | cut -f1)"
for spec in "default:" "eval:[eval]" "external:[external]" "test:[test]" "all:[test,eval,external]"; do
  name=${spec%%:*}
  extra=${spec#*:}
  python3 -m venv "$WORK/$name"
  "$WORK/$name/bin/pip" install -q "$SRC$extra" 2>/dev/null
  echo "pip install .$extra: $(du -sh "$WORK/$name" | cut -f1)"
  rm -rf "$WORK/$name"
done
rm -rf "$WORK"
