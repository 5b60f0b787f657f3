#!/usr/bin/env bash
# shellcheck disable=SC2317 # start_$peer and the *_ready checks are called by name
# Starts the lock servers Baton is benchmarked against (Redis, PostgreSQL,
# etcd, ZooKeeper) from Debian's packages, on 127.0.0.1 only and on ports
# of their own, as plain background processes (no systemd), each with its
# state, log and pidfile in one directory. Then writes DIR/peers.env with
# the BENCH_* variables the bench and the peer tests read.
#
#   bench/peers/start.sh [--dir DIR] [PEER...]
#
# PEER is redis, postgres, etcd or zookeeper (default: all four). DIR is
# --dir, else $BENCH_PEERS_DIR, else /tmp/baton-peers. A peer whose package
# cannot be installed or whose server does not come up is skipped with a
# message and the others go on; the script fails only when none of the
# peers asked for is running. A peer already running from DIR is kept.
# Ports: 16379 (redis), 15432 (postgres), 12379 and 12380 (etcd), 12181
# (zookeeper); BENCH_REDIS_PORT, BENCH_POSTGRES_PORT, BENCH_ETCD_PORT,
# BENCH_ETCD_PEER_PORT and BENCH_ZOOKEEPER_PORT override them.
# Stop them with bench/peers/stop.sh (same --dir).
set -euo pipefail

readonly ALL_PEERS=(redis postgres etcd zookeeper)
readonly REDIS_PORT=${BENCH_REDIS_PORT:-16379}
readonly POSTGRES_PORT=${BENCH_POSTGRES_PORT:-15432}
readonly ETCD_CLIENT_PORT=${BENCH_ETCD_PORT:-12379}
readonly ETCD_PEER_PORT=${BENCH_ETCD_PEER_PORT:-12380}
readonly ZOOKEEPER_PORT=${BENCH_ZOOKEEPER_PORT:-12181}
# The scenarios hold up to ~1000 sessions at once; PostgreSQL's default of
# 100 connections and ZooKeeper's 60 per address would refuse them.
readonly POSTGRES_MAX_CONNECTIONS=1200

usage() {
	echo "usage: $0 [--dir DIR] [redis|postgres|etcd|zookeeper ...]" >&2
	exit 2
}

dir=${BENCH_PEERS_DIR:-/tmp/baton-peers}
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
	redis | postgres | etcd | zookeeper)
		peers+=("$1")
		shift
		;;
	-h | --help) usage ;;
	*)
		echo "start.sh: unknown peer or option: $1" >&2
		usage
		;;
	esac
done
((${#peers[@]})) || peers=("${ALL_PEERS[@]}")
for port in "$REDIS_PORT" "$POSTGRES_PORT" "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$ZOOKEEPER_PORT"; do
	if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
		echo "start.sh: port '$port' is not a number from 1 to 65535" >&2
		exit 2
	fi
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# Servers inherit this; 1000 clients need more than the usual soft 1024.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

say() { echo "start.sh: $*" >&2; }
skip() { say "skipping $1: $2"; }

as_root() {
	if ((EUID == 0)); then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		return 1
	fi
}

apt_updated=0
# ensure_package PKG GLOB: installs PKG with apt-get unless a file
# matches GLOB.
ensure_package() {
	local pkg=$1 glob=$2
	compgen -G "$glob" >/dev/null && return 0
	if ((EUID != 0)) && ! { command -v sudo >/dev/null && sudo -n true 2>/dev/null; }; then
		say "cannot install $pkg: not root and no passwordless sudo"
		return 1
	fi
	say "installing $pkg"
	if ((!apt_updated)); then
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >"$dir/apt.log" 2>&1 || {
			say "apt-get update failed (see $dir/apt.log)"
			return 1
		}
		apt_updated=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" >>"$dir/apt.log" 2>&1 || {
		say "apt-get install $pkg failed (see $dir/apt.log)"
		return 1
	}
	compgen -G "$glob" >/dev/null
}

# port_in_use PORT: something already accepts connections on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ask PORT REQUEST: sends REQUEST to 127.0.0.1:PORT and prints the answer.
ask() {
	local port=$1 request=$2
	# shellcheck disable=SC2016 # $0 and $1 are the inner shell's
	timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" && printf "%b" "$1" >&3 && timeout 1 cat <&3' \
		"$port" "$request" 2>/dev/null || true
}

alive() { [[ -f $dir/$1.pid ]] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null; }

# wait_until PEER SECONDS CHECK...: polls CHECK every 0.2 s while PEER's
# process lives; fails when it dies or time runs out.
wait_until() {
	local peer=$1 seconds=$2
	shift 2
	local deadline=$((SECONDS + seconds))
	while ((SECONDS < deadline)); do
		"$@" && return 0
		alive "$peer" || return 1
		sleep 0.2
	done
	return 1
}

# launch PEER CMD...: runs CMD in a session of its own, detached from this
# shell, output to DIR/PEER.log, and records its PID.
launch() {
	local peer=$1
	shift
	setsid "$@" </dev/null >>"$dir/$peer.log" 2>&1 &
	echo $! >"$dir/$peer.pid"
}

redis_ready() { [[ $(ask "$REDIS_PORT" 'PING\r\nQUIT\r\n') == +PONG* ]]; }
etcd_ready() { [[ $(ask "$ETCD_CLIENT_PORT" 'GET /health HTTP/1.0\r\n\r\n') == *'"health":"true"'* ]]; }
zookeeper_ready() { [[ $(ask "$ZOOKEEPER_PORT" 'ruok') == imok ]]; }
postgres_ready() { "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$POSTGRES_PORT" -U postgres -d postgres; }

start_redis() {
	ensure_package redis-server /usr/bin/redis-server || return 1
	mkdir -p "$dir/redis"
	# No persistence: a lock service's keys live for seconds.
	launch redis /usr/bin/redis-server --bind 127.0.0.1 --port "$REDIS_PORT" \
		--dir "$dir/redis" --save '' --appendonly no --daemonize no \
		--maxclients 10000
	wait_until redis 20 redis_ready
}

start_etcd() {
	ensure_package etcd-server /usr/bin/etcd || return 1
	mkdir -p "$dir/etcd"
	local client=http://127.0.0.1:$ETCD_CLIENT_PORT peer=http://127.0.0.1:$ETCD_PEER_PORT
	launch etcd /usr/bin/etcd --name baton-bench --data-dir "$dir/etcd/data" \
		--listen-client-urls "$client" --advertise-client-urls "$client" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
		--initial-cluster "baton-bench=$peer" --initial-cluster-state new \
		--logger zap --log-outputs stderr
	wait_until etcd 30 etcd_ready
}

start_zookeeper() {
	ensure_package zookeeper /usr/share/zookeeper/bin/zkServer.sh || return 1
	command -v java >/dev/null || {
		say "no java on PATH"
		return 1
	}
	local zk=$dir/zookeeper
	mkdir -p "$zk/data"
	cat >"$zk/zoo.cfg" <<-EOF
		tickTime=2000
		dataDir=$zk/data
		clientPortAddress=127.0.0.1
		clientPort=$ZOOKEEPER_PORT
		maxClientCnxns=0
		admin.enableServer=false
		4lw.commands.whitelist=ruok,srvr,mntr
	EOF
	# zookeeper.jar's manifest names its dependencies; slf4j-simple, when
	# Debian has it, sends the log to stderr instead of nowhere.
	local classpath=/usr/share/java/zookeeper.jar
	[[ -e /usr/share/java/slf4j-simple.jar ]] && classpath+=:/usr/share/java/slf4j-simple.jar
	launch zookeeper java -cp "$classpath" \
		org.apache.zookeeper.server.ZooKeeperServerMain "$zk/zoo.cfg"
	wait_until zookeeper 60 zookeeper_ready
}

start_postgres() {
	ensure_package postgresql '/usr/lib/postgresql/*/bin/postgres' || return 1
	pg_bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1)
	[[ -x $pg_bin/postgres ]] || {
		say "no postgres binary under /usr/lib/postgresql"
		return 1
	}
	# postgres refuses to run as root: root runs it as the package's user.
	local run=()
	if ((EUID == 0)); then
		id postgres >/dev/null 2>&1 || {
			say "no postgres user"
			return 1
		}
		run=(runuser -u postgres --)
	fi
	local pg=$dir/postgres
	mkdir -p "$pg"
	((EUID == 0)) && chown postgres: "$pg"
	"${run[@]}" test -w "$pg" || {
		say "$pg is not writable by the postgres user (is $dir under a private home?)"
		return 1
	}
	if [[ ! -f $pg/data/PG_VERSION ]]; then
		# trust: a private throwaway cluster reachable from 127.0.0.1 only.
		"${run[@]}" "$pg_bin/initdb" -D "$pg/data" -U postgres --auth=trust \
			--no-sync >>"$dir/postgres.log" 2>&1 || {
			say "initdb failed (see $dir/postgres.log)"
			return 1
		}
	fi
	launch postgres "${run[@]}" "$pg_bin/postgres" -D "$pg/data" \
		-c listen_addresses=127.0.0.1 -p "$POSTGRES_PORT" -k "$pg" \
		-c max_connections="$POSTGRES_MAX_CONNECTIONS"
	wait_until postgres 30 postgres_ready || return 1
	# runuser forks: the pidfile must name the postmaster itself.
	head -1 "$pg/data/postmaster.pid" >"$dir/postgres.pid"
}

port_of() {
	case $1 in
	redis) echo "$REDIS_PORT" ;;
	postgres) echo "$POSTGRES_PORT" ;;
	etcd) echo "$ETCD_CLIENT_PORT" ;;
	zookeeper) echo "$ZOOKEEPER_PORT" ;;
	esac
}

pg_bin= # set by start_postgres
for peer in "${peers[@]}"; do
	if alive "$peer"; then
		say "$peer already running (pid $(cat "$dir/$peer.pid"))"
		continue
	fi
	rm -f "$dir/$peer.pid"
	if port_in_use "$(port_of "$peer")"; then
		skip "$peer" "127.0.0.1:$(port_of "$peer") is already taken by another process"
		continue
	fi
	if "start_$peer"; then
		say "$peer running on 127.0.0.1:$(port_of "$peer") (pid $(cat "$dir/$peer.pid"))"
	else
		if alive "$peer"; then
			# Started but never answered: do not leave it behind.
			kill -KILL "$(cat "$dir/$peer.pid")" 2>/dev/null || true
		fi
		rm -f "$dir/$peer.pid"
		skip "$peer" "did not start (see $dir/$peer.log)"
	fi
done

# peers.env names every peer running from DIR, whichever run started it.
{
	echo "# written by bench/peers/start.sh; source it before the bench"
	alive redis && echo "export BENCH_REDIS_ADDR=127.0.0.1:$REDIS_PORT"
	alive postgres && echo "export BENCH_POSTGRES_DSN='postgres://postgres@127.0.0.1:$POSTGRES_PORT/postgres?sslmode=disable'"
	alive etcd && echo "export BENCH_ETCD_ENDPOINT=127.0.0.1:$ETCD_CLIENT_PORT"
	alive zookeeper && echo "export BENCH_ZOOKEEPER=127.0.0.1:$ZOOKEEPER_PORT"
	true
} >"$dir/peers.env"
say "wrote $dir/peers.env"

for peer in "${peers[@]}"; do
	alive "$peer" && exit 0
done
say "none of ${peers[*]} is running"
exit 1
