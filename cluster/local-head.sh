#!/bin/sh
# A Ray head node of this project's own on one machine, beside any other Ray use there.
#
#   cluster/local-head.sh start DIR [CPUS]   start it; prints its job-submission address
#   cluster/local-head.sh stop DIR           stop it, and only it
#
# `ray start --head` takes fixed default ports (6379, 8265, 52365, 10001) and /tmp/ray, so a second
# head on the same machine fails or shares another's session, and `ray stop` ends every Ray process
# of the machine, someone else's sweep included. This head takes free ports and DIR as its temp dir
# (keep DIR short: Ray's socket paths must fit 107 bytes), runs under `--block` in a session of its
# own, and is stopped by signalling that session alone. DIR also holds `address` (for `ray job
# submit --address`), `gcs_address` (for `RAY_ADDRESS` or `contractrl run --ray-address`), `pid` and
# `head.log`. Set RAY_AUTH_MODE=token before `ray job` commands (docs/cluster.md).
set -eu

usage() { echo "usage: $0 start DIR [CPUS] | stop DIR" >&2; exit 2; }
# running, not a zombie waiting to be reaped (kill -0 answers yes for a zombie too)
alive() {
    if [ -r "/proc/$1/stat" ]; then
        [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" != Z ]
    else
        kill -0 "$1" 2>/dev/null
    fi
}
[ $# -ge 2 ] || usage
action=$1
dir=$2
here=$(cd "$(dirname "$0")" && pwd)
ray_bin=${RAY_BIN:-$(command -v ray || echo "$here/../.venv/bin/ray")}

case "$action" in
start)
    cpus=${3:-$(getconf _NPROCESSORS_ONLN)}
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
        echo "$0: a head is already running from $dir (pid $(cat "$dir/pid")); stop it first" >&2
        exit 1
    fi
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    # eight free ports, one per listening service of a head node
    set -- $(python3 -c 'import socket
socks = [socket.socket() for _ in range(8)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')
    RAY_AUTH_MODE=${RAY_AUTH_MODE:-token} setsid "$ray_bin" start --head --block --temp-dir="$dir" --num-cpus="$cpus" \
        --port="$1" --dashboard-host=127.0.0.1 --dashboard-port="$2" --include-dashboard=true \
        --dashboard-agent-listen-port="$3" --dashboard-agent-grpc-port="$4" --metrics-export-port="$5" \
        --runtime-env-agent-port="$6" --ray-client-server-port="$7" --node-manager-port="$8" \
        >"$dir/head.log" 2>&1 </dev/null &
    echo $! >"$dir/pid"
    echo "http://127.0.0.1:$2" >"$dir/address"
    echo "127.0.0.1:$1" >"$dir/gcs_address"
    tries=0
    until RAY_AUTH_MODE=${RAY_AUTH_MODE:-token} "$ray_bin" job list --address "http://127.0.0.1:$2" >/dev/null 2>&1; do
        tries=$((tries + 1))
        if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null || [ $tries -ge 60 ]; then
            echo "$0: the head did not come up; its log: $dir/head.log" >&2
            tail -n 20 "$dir/head.log" >&2 || true
            kill -TERM "-$(cat "$dir/pid")" 2>/dev/null || true
            exit 1
        fi
        sleep 2
    done
    cat "$dir/address"
    ;;
stop)
    [ -f "$dir/pid" ] || { echo "$0: no head started from $dir (no $dir/pid)" >&2; exit 1; }
    pid=$(cat "$dir/pid")
    # the head's session: `ray start --block` and the processes it started, nothing else
    kill -TERM "-$pid" 2>/dev/null || true
    tries=0
    while alive "$pid" && [ $tries -lt 30 ]; do tries=$((tries + 1)); sleep 1; done
    if alive "$pid"; then
        # a head that ignored TERM (a loaded machine): kill its session, and wait until it is gone
        kill -KILL "-$pid" 2>/dev/null || true
        tries=0
        while alive "$pid" && [ $tries -lt 10 ]; do tries=$((tries + 1)); sleep 1; done
        if alive "$pid"; then
            echo "$0: the head of $dir (pid $pid) survived TERM and KILL" >&2
            exit 1
        fi
    fi
    kill -KILL "-$pid" 2>/dev/null || true  # whatever of its session outlived the head
    rm -f "$dir/pid"
    echo "stopped the head of $dir"
    ;;
*) usage ;;
esac
