#!/usr/bin/env bash
# Installs the Debian 12 packages pillbox needs, only those that are missing.
#   tools/setup.sh           what the product needs to build and run (the demo)
#   tools/setup.sh --tests   that, and what the test suite needs besides
# Safe to run repeatedly; does nothing when all are present.
set -euo pipefail

# Building and running pillbox (tools/demo.sh needs nothing else).
product=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-filesystem-dev          # Boost.Process (header-only, needs filesystem)
  libseccomp-dev                                # seccomp-bpf allowlists
  libzmq3-dev cppzmq-dev                        # ZeroMQ wire
  libmsgpack-cxx-dev                            # msgpack frames
  libspdlog-dev nlohmann-json3-dev              # logging, JSON lines
  libcli11-dev                                  # the command line's grammar (CLI11, header-only)
  libsqlite3-dev                                # embedded store
  libhiredis-dev                                # Redis Streams broker (client)
  librabbitmq-dev                               # RabbitMQ broker (client: rabbitmq-c)
  librdkafka-dev                                # Kafka broker (client: librdkafka, its C++ API; its mock cluster for the tests)
  libcpp-httplib-dev libssl-dev                 # HTTP for serve and --metrics; serve's token (RAND_bytes)
  libarchive-dev                                # serve: a record's bundle as a .tar.gz
  libpoppler-cpp-dev zlib1g-dev                 # pdf-text and inflate handlers
  libfontconfig-dev                             # pdf-text: poppler's font lookup, loaded before any fork
  python3 gzip                                  # the demo: a Python parser, a decompression bomb
)

# Only the tests (tools/test.sh) use these.
tests=(
  doctest-dev                                   # unit and end-to-end tests
  redis-server                                  # a real Redis the fleet tests start themselves
  rabbitmq-server                               # a real RabbitMQ the fleet tests start themselves (as root)
  prometheus                                    # promtool: checks what /metrics serves
  nodejs default-jre-headless ruby              # real interpreters whose tracebacks the classifier reads
  poppler-utils                                 # pdftotext: the reference tests/e2e/pdf_corpus_test.cpp compares with
  clang libclang-rt-14-dev                      # fuzz/ harnesses and the ASan/UBSan build: clang 14; libFuzzer and the sanitizer
                                                # runtimes (only recommended by clang, so named here)
  llvm-14                                       # llvm-symbolizer: fuzz findings with function names
  chromium                                      # tests/e2e/console_test.cpp loads the console's pages headless
)

packages=("${product[@]}")
case "${1:-}" in
  "") ;;
  --tests) packages+=("${tests[@]}") ;;
  *) echo "setup: unknown option '$1' (use no option for the product, --tests for the test suite too)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 3
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
