#!/usr/bin/env bash
# Stops the peer servers that bench/peers/start.sh started, each by the PID
# in its pidfile: a polite signal, up to 15 s to exit, then KILL. Keeps
# their data and logs unless --purge is given.
#
#   bench/peers/stop.sh [--dir DIR] [--purge] [PEER...]
#
# PEER is redis, postgres, etcd or zookeeper (default: all four). DIR is
# --dir, else $BENCH_PEERS_DIR, else /tmp/baton-peers. --purge also deletes
# DIR/PEER (the stopped peer's data) and DIR/PEER.log.
set -euo pipefail

readonly ALL_PEERS=(redis postgres etcd zookeeper)
readonly GRACE_SECONDS=15

usage() {
	echo "usage: $0 [--dir DIR] [--purge] [redis|postgres|etcd|zookeeper ...]" >&2
	exit 2
}

dir=${BENCH_PEERS_DIR:-/tmp/baton-peers}
purge=0
peers=()
while (($#)); do
	case $1 in
	--dir)
		(($# >= 2)) || usage
		dir=$2
		shift 2
		;;
	--dir=*)
		dir=${1#--dir=}
		shift
		;;
	--purge)
		purge=1
		shift
		;;
	redis | postgres | etcd | zookeeper)
		peers+=("$1")
		shift
		;;
	-h | --help) usage ;;
	*)
		echo "stop.sh: unknown peer or option: $1" >&2
		usage
		;;
	esac
done
((${#peers[@]})) || peers=("${ALL_PEERS[@]}")

say() { echo "stop.sh: $*" >&2; }

# The program each peer's pidfile must point at: a PID reused by some
# other process since the start is left alone.
program_of() {
	case $1 in
	redis) echo redis-server ;;
	postgres) echo postgres ;;
	etcd) echo etcd ;;
	zookeeper) echo java ;;
	esac
}

# PostgreSQL takes TERM as "wait for every client to leave"; INT is its
# fast shutdown, which is what stopping a benchmark peer means.
signal_of() {
	case $1 in
	postgres) echo INT ;;
	*) echo TERM ;;
	esac
}

status=0
for peer in "${peers[@]}"; do
	pidfile=$dir/$peer.pid
	if [[ ! -f $pidfile ]]; then
		say "$peer: no pidfile in $dir, not running from there"
	else
		pid=$(cat "$pidfile")
		if ! [[ $pid =~ ^[0-9]+$ ]]; then
			say "$peer: pidfile $pidfile holds no PID: '$pid'"
			status=1
			continue
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			say "$peer: pid $pid already gone"
		elif ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$(program_of "$peer")"; then
			say "$peer: pid $pid is not $(program_of "$peer") any more, leaving it alone"
		else
			kill -"$(signal_of "$peer")" "$pid"
			deadline=$((SECONDS + GRACE_SECONDS))
			while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
				sleep 0.1
			done
			if kill -0 "$pid" 2>/dev/null; then
				say "$peer: pid $pid still there after ${GRACE_SECONDS}s, sending KILL"
				kill -KILL "$pid" 2>/dev/null || true
			fi
			say "$peer stopped (pid $pid)"
		fi
		rm -f "$pidfile"
	fi
	if ((purge)) && [[ -e $dir/$peer || -e $dir/$peer.log ]]; then
		rm -rf "${dir:?}/$peer" "$dir/$peer.log"
		say "$peer: removed $dir/$peer and its log"
	fi
done

# Keep peers.env naming only what still runs.
if [[ -f $dir/peers.env ]]; then
	for peer in "${peers[@]}"; do
		case $peer in
		redis) var=BENCH_REDIS_ADDR ;;
		postgres) var=BENCH_POSTGRES_DSN ;;
		etcd) var=BENCH_ETCD_ENDPOINT ;;
		zookeeper) var=BENCH_ZOOKEEPER ;;
		esac
		sed -i "/^export $var=/d" "$dir/peers.env"
	done
fi
exit $status
