#!/bin/sh
# The user, /etc/cdcctl and /var/lib/cdc-agent are kept: the node's state
# and its operator's config outlive the package.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
