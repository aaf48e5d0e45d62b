#!/bin/sh
# The unit is installed but not enabled: the example config must be
# edited first (node-id, addr, etcd, TLS), then
#   systemctl enable --now cdc-agent
# An upgrade restarts an agent that was running; SIGINT makes that a
# graceful stop (partitions handed over), so no work is lost.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
	systemctl try-restart cdc-agent.service >/dev/null 2>&1 || true
fi
