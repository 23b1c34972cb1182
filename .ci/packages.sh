# What the test scripts share, sourced by .ci/test, tests/browser/run.sh and clients/run-tests.sh:
#   have TOOL              whether TOOL is on the PATH
#   install_packages PKG…  installs Debian packages (apt-get, through sudo unless root), or says
#                          what is missing and exits where there is no apt-get

have() { command -v "$1" >/dev/null 2>&1; }

install_packages() {
  if ! have apt-get; then
    echo "missing: $* (install them with your package manager)" >&2
    exit 1
  fi
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
