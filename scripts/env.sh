# Sourced by scripts/test and scripts/bench: a .venv with minijit installed (editable).
# EXTRAS selects pip extras, e.g. EXTRAS=test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

apt_install() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "installing with apt-get: $*" >&2
    $sudo apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@"
}

python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
if [ ! -x .venv/bin/python ]; then
    python3 -m venv --system-site-packages .venv
fi
spec="."
[ -n "${EXTRAS:-}" ] && spec=".[${EXTRAS}]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e "$spec"
