# find_tool.sh - sourced by the checks in tests/sass: cs_find_tool NAME PYTHON
# prints the path of a CUDA tool from the test venv's PyPI packages
# (site-packages/nvidia/*/bin/NAME), else from PATH or /usr/local/cuda/bin;
# prints nothing when absent.
cs_find_tool() {
    name=$1
    py=$2
    venv=$(dirname "$(dirname "$py")")
    for f in "$venv"/lib/python3*/site-packages/nvidia/*/bin/"$name"; do
        if [ -x "$f" ]; then echo "$f"; return 0; fi
    done
    if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
    if [ -x "/usr/local/cuda/bin/$name" ]; then echo "/usr/local/cuda/bin/$name"; return 0; fi
    return 0
}
