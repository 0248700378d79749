#!/usr/bin/env bash
# Rebuild cudamagic's JupyterLab extension (labextension/lib/index.js) into labextension/prebuilt/,
# the files the wheel installs in share/jupyter/labextensions/cudamagic-jupyterlab/.
# Needs node 18+ and npm (the registry, once, for @jupyterlab/builder) and a python with
# JupyterLab 4 (its staging package.json names the versions JupyterLab shares with extensions):
#   scripts/build_labextension.sh [PYTHON]
set -euo pipefail
python="${1:-python}"
cd "$(dirname "$0")/../labextension"
core="$("$python" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')"
npm ci --no-audit --no-fund
rm -rf prebuilt
node node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path "$core" .
cp install.json prebuilt/
echo "built: $(pwd)/prebuilt"
