#!/bin/sh
# On removal (not on upgrade: deb says "upgrade", rpm counts 1), stop and
# disable the agent. Stopping is graceful, but a capture that still has
# work should be drained first: cdcctl drain <node> --watch.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl --no-reload disable --now cdc-agent.service >/dev/null 2>&1 || true
	fi
	;;
esac
