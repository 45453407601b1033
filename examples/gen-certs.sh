#!/usr/bin/env bash
# Generates the certificates examples/edge-gateway.yaml reads: a CA, a server
# certificate for localhost and a client certificate, into examples/certs/.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/certs"
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=courier example CA" \
  -keyout ca.key -out ca.pem 2>/dev/null
for who in server client; do
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$who.localhost" -keyout "$who.key" -out "$who.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,DNS:%s.localhost,IP:127.0.0.1\n' "$who" > "$who.ext"
  openssl x509 -req -in "$who.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -extfile "$who.ext" -out "$who.pem" 2>/dev/null
  rm -f "$who.csr" "$who.ext"
done
echo "certificates written to $dir"
