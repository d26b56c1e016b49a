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

# pip install -e only when the install is missing or stale: .venv/.minijit-install records the
# hash of pyproject.toml (line 1) and the extras installed with it (one a line). Editing .py files
# needs no reinstall (editable); a changed pyproject.toml, an extra not installed yet, or an
# install that is not this checkout's editable one does. rm .venv/.minijit-install to force one.
_mj_stamp=.venv/.minijit-install
_mj_hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
_mj_want="$(tr ', ' '\n\n' <<<"${EXTRAS:-}" | sed '/^$/d' | sort -u)"
_mj_have=""
_mj_fresh=0
_mj_editable_here='
import importlib.metadata as md, json, pathlib, sys, urllib.parse
url = json.loads(md.distribution("minijit").read_text("direct_url.json") or "{}")
path = urllib.parse.unquote(urllib.parse.urlparse(url.get("url", "")).path)
sys.exit(0 if url.get("dir_info", {}).get("editable") and pathlib.Path(path).resolve() == pathlib.Path.cwd() else 1)'
if [ -f "$_mj_stamp" ] && [ "$(head -n 1 "$_mj_stamp")" = "$_mj_hash" ] \
    && .venv/bin/python -I -c "$_mj_editable_here" 2>/dev/null; then
    _mj_fresh=1
    _mj_have="$(tail -n +2 "$_mj_stamp")"
fi
if [ "$_mj_fresh" = 0 ] || [ -n "$(comm -23 <(echo "$_mj_want") <(echo "$_mj_have"))" ]; then
    # keep the extras installed before (same pyproject.toml): bench's plain install after test's
    # .[test] install needs nothing, and test after bench installs .[test]
    _mj_extras="$(printf '%s\n%s\n' "$_mj_want" "$_mj_have" | sed '/^$/d' | sort -u)"
    _mj_spec="."
    [ -z "$_mj_extras" ] || _mj_spec=".[$(paste -sd, <<<"$_mj_extras")]"
    rm -f "$_mj_stamp"
    .venv/bin/python -m pip install -q --disable-pip-version-check -e "$_mj_spec"
    printf '%s\n%s\n' "$_mj_hash" "$_mj_extras" | sed '/^$/d' >"$_mj_stamp"
fi
