#!/bin/bash
# noida-db advertises the address it binds to: bind the container's own
# address on its network (not 0.0.0.0), so that clients in other containers
# are sent back to an address they can reach. Topics and transactions are
# kept in /var/lib/kafka (a volume); SIGTERM saves them and stops it.
set -euo pipefail
address=$(hostname -i | cut -d' ' -f1)
exec /usr/local/bin/noida-db start --only kafka --host "$address" --kafka-port 9092 --data-dir /var/lib/kafka
