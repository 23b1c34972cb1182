#!/usr/bin/env bash
# The inbox page's browser tests (issue 5): installs what is missing (Debian's chromium, node, this
# folder's npm packages), builds gatehouse, and runs every test in a real headless Chromium.
# Screenshots of the main states land in tests/browser/screenshots/ (git-ignored).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

source "$repo/.ci/packages.sh"

# playwright-core drives the system's Chromium: its own browser downloads are not used.
missing=()
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || missing+=(chromium)
have node || missing+=(nodejs)
have npm || missing+=(npm)
[ ${#missing[@]} -eq 0 ] || install_packages "${missing[@]}"

if [ ! -d "$here/node_modules/playwright-core" ]; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
fi

(cd "$repo" && cargo build --locked --quiet)

cd "$here"
node --test inbox.test.mjs answer-link.test.mjs auth.test.mjs permission.test.mjs form.test.mjs
