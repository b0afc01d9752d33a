#!/bin/sh
# Create the home on the data volume on first start (idempotent), then run the command.
set -eu
if [ "$(id -u)" = "0" ]; then
  echo "Pinch refuses to run as root in the container; run it as the image's 'pinch' user." >&2
  exit 1
fi
pinch init >/dev/null
exec "$@"
