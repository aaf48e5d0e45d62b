#!/bin/sh
# The agent runs as its own system user (deploy/systemd/cdc-agent.service);
# the config file's group is that user's, so it must exist first.
set -e
if ! getent group cdc-agent >/dev/null 2>&1; then
	groupadd --system cdc-agent
fi
if ! getent passwd cdc-agent >/dev/null 2>&1; then
	useradd --system --gid cdc-agent --home-dir /var/lib/cdc-agent --no-create-home \
		--shell /usr/sbin/nologin --comment "cdcctl replication agent" cdc-agent
fi
