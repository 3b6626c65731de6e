#!/bin/sh
# Container health check of the serving images: the gRPC health service of the server in this
# container, spoken the way the server listens (plaintext, TLS or mutual TLS, from the same
# ATTNSERVE_* settings). Exit 0 when the server says SERVING.
#
# With TLS on, the server's certificate is checked against ATTNSERVE_HEALTHCHECK_TLS_CA
# (default: ATTNSERVE_TLS_CERT, which holds for a self-signed certificate or a chain that
# ends at its root) for the name ATTNSERVE_HEALTHCHECK_TLS_SERVER_NAME (default: the
# certificate must name 127.0.0.1). With mutual TLS the check presents
# ATTNSERVE_HEALTHCHECK_TLS_CERT / _KEY (default: the server's own pair, which the client CA
# must have signed for client authentication).
set -eu

port="${ATTNSERVE_PORT:-50051}"
set -- health --target "127.0.0.1:$port" --timeout "${ATTNSERVE_HEALTHCHECK_TIMEOUT:-4}"

if [ -n "${ATTNSERVE_TLS_CERT:-}" ]; then
  set -- "$@" --tls-ca "${ATTNSERVE_HEALTHCHECK_TLS_CA:-$ATTNSERVE_TLS_CERT}"
  if [ -n "${ATTNSERVE_HEALTHCHECK_TLS_SERVER_NAME:-}" ]; then
    set -- "$@" --tls-server-name "$ATTNSERVE_HEALTHCHECK_TLS_SERVER_NAME"
  fi
  if [ -n "${ATTNSERVE_TLS_CLIENT_CA:-}" ]; then
    set -- "$@" --tls-cert "${ATTNSERVE_HEALTHCHECK_TLS_CERT:-${ATTNSERVE_TLS_CERT}}" \
      --tls-key "${ATTNSERVE_HEALTHCHECK_TLS_KEY:-${ATTNSERVE_TLS_KEY:?ATTNSERVE_TLS_KEY goes with ATTNSERVE_TLS_CERT}}"
  fi
fi

exec attnserve-client "$@"
