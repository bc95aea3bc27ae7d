#!/usr/bin/env bash
# Installs what building densegate needs on Debian 12, when it is missing.
# Idempotent: does nothing (and needs no network) when all is installed.
#
#   tools/bootstrap.sh            build dependencies
#   tools/bootstrap.sh --test     also what the test suite needs
set -euo pipefail

packages=(
  bazel-bootstrap g++ git ca-certificates
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libpqxx-dev libpq-dev libsqlite3-dev
  libbenchmark-dev libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  libpugixml-dev libssl-dev zlib1g-dev
  bubblewrap libseccomp-dev
)
if [[ "${1:-}" == "--test" ]]; then
  # PostgreSQL for the store tests; gRPC for Python for the cross-language
  # client test; Chromium to render the HTML report headless.
  packages+=(postgresql-15 python3-grpcio python3-grpc-tools chromium)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "bootstrap: installing ${missing[*]}" >&2
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    sudo=(sudo)
  else
    echo "bootstrap: missing packages (${missing[*]}) and not root; install them" \
         "as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
