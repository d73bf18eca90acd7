#!/usr/bin/env bash
# overlayd Docker Swarm testnet: the stack of stack.yml (a seed supernode,
# replicated supernodes, mega-supernodes and ordinary nodes on a private
# overlay network) on this machine's swarm.
#
#   testnet.sh up       swarm init if needed, build the binary and image, create the secret, deploy, wait until formed
#   testnet.sh status   the services, and a load line per supernode (and one per client)
#   testnet.sh chaos    scale supernodes down ~30%, hand a mega back and promote it again, then messages
#   testnet.sh down     remove the stack, secret, network, image, generated files; leave the swarm if up joined it
#   testnet.sh smoke    up, chaos, down (down also on failure), bounded by a timeout
#
# Environment: SUPERNODES (default 3), MEGAS (2), CLIENTS (6), SN_CAPACITY (1: a full supernode sends clients on), SMOKE_TIMEOUT (seconds, default 240),
# SWARM_ADVERTISE_ADDR (for `docker swarm init` when the engine cannot pick one).
# Every wait is a poll with a deadline. Scratch has no shell, so every check
# runs the overlayd binary inside a task container (docker exec C /overlayd ...):
# status and chaos see the tasks of this machine, all of them in a one-node swarm.
set -euo pipefail
umask 077

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NAME="swarm testnet"                # the prefix of failure messages
OVL_DATA=(--data-dir /data)         # where stack.yml puts each task's data dir
F=1                                 # deadlines are not scaled (lib.sh's dl)
# shellcheck source=SCRIPTDIR/../lib.sh
. "$ROOT/testnet/lib.sh"
GEN=$HERE/gen                       # generated, gitignored: seed identity, operator key, markers
STACK=overlayd-swarm                # stack namespace: services, network carry it
NETWORK=${STACK}_overlay            # the stack's overlay network
SECRET=overlayd-swarm-seed-key      # the seed's identity key (stack.yml: external)
IMAGE=${OVERLAYD_SWARM_IMAGE:-overlayd-swarm:local}
SUPERNODES=${SUPERNODES:-3}
MEGAS=${MEGAS:-2}
CLIENTS=${CLIENTS:-6}
SN_CAPACITY=${SN_CAPACITY:-1}
GROUP=swarm-chaos

# cids SERVICE prints the running task containers of a service (seed, supernode, mega, client).
cids() { docker ps -q --filter "label=com.docker.swarm.service.name=${STACK}_$1" | sort; }
all_cids() { docker ps -q --filter "label=com.docker.stack.namespace=$STACK" | sort; }
# cname CID prints the task's name: service.slot.
cname() { docker inspect -f '{{index .Config.Labels "com.docker.swarm.task.name"}}' "$1" | cut -d. -f1-2 | sed "s/^${STACK}_//"; }

# ---- up -------------------------------------------------------------------

swarm_state() { docker info -f '{{.Swarm.LocalNodeState}}' 2>/dev/null; }

swarm_init() {
	local state
	state=$(swarm_state)
	if [ "$state" = active ]; then
		[ "$(docker info -f '{{.Swarm.ControlAvailable}}')" = true ] || fail "this engine is a swarm worker: run testnet.sh on a manager"
		log "swarm already active: using it (down will not leave it)"
		return
	fi
	[ "$state" = inactive ] || fail "swarm state is ${state:-unknown}"
	# Markers, so that down undoes only what up did.
	docker network inspect docker_gwbridge >/dev/null 2>&1 || : >"$GEN/gwbridge-created"
	docker swarm init ${SWARM_ADVERTISE_ADDR:+--advertise-addr "$SWARM_ADVERTISE_ADDR"} >"$GEN/swarm-init.log" 2>&1 ||
		{ cat "$GEN/swarm-init.log" >&2; rm -f "$GEN/gwbridge-created"; fail "docker swarm init (set SWARM_ADVERTISE_ADDR?)"; }
	: >"$GEN/swarm-initialised"
	log "swarm initialised (down will leave it)"
}

build() {
	build_binary
	# The image's /data, owned by root and 0700, as a tar for the Dockerfile.
	rm -rf "$GEN/image/root" && mkdir -p "$GEN/image/root/data" && chmod 700 "$GEN/image/root/data"
	tar -C "$GEN/image/root" --owner=0 --group=0 -cf "$GEN/image/data.tar" data
	build_image "com.docker.stack.namespace=$STACK"
}

# setup generates on the host: the operator key (it stays here), the seed's
# identity, and the seed's secret.
setup() {
	local bin=$GEN/image/overlayd
	[ -f "$GEN/operator.key" ] || "$bin" operator keygen --out "$GEN/operator.key" >"$GEN/operator.pub" 2>/dev/null
	SEED_ID=$("$bin" identity --data-dir "$GEN/seed")
	docker secret inspect "$SECRET" >/dev/null 2>&1 ||
		docker secret create --label "com.docker.stack.namespace=$STACK" "$SECRET" "$GEN/seed/identity.key" >/dev/null
	export OVERLAYD_SWARM_IMAGE=$IMAGE OVERLAYD_SWARM_SEED_ID=$SEED_ID
	export OVERLAYD_SWARM_OPERATOR_PUBKEY
	OVERLAYD_SWARM_OPERATOR_PUBKEY=$(cat "$GEN/operator.pub")
	export OVERLAYD_SWARM_SUPERNODES=$SUPERNODES OVERLAYD_SWARM_MEGAS=$MEGAS OVERLAYD_SWARM_CLIENTS=$CLIENTS OVERLAYD_SWARM_SN_CAPACITY=$SN_CAPACITY
	log "setup: operator key $GEN/operator.key ($OVERLAYD_SWARM_OPERATOR_PUBKEY), seed $SEED_ID, secret $SECRET"
}

total() { echo $((1 + SUPERNODES + MEGAS + CLIENTS)); }

all_healthy() {
	local c n=0
	for c in $(all_cids); do
		[ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c")" = healthy ] || return 1
		n=$((n + 1))
	done
	[ "$n" -eq "$(total)" ]
}

# promote_mega CID signs, on the host, a mega-supernode certificate for the
# task's peer ID and hands it to the running daemon on stdin.
promote_mega() {
	local id
	id=$(peer_of "$1")
	[ -n "$id" ] || fail "no peer ID from $(cname "$1")"
	"$GEN/image/overlayd" operator promote --key "$GEN/operator.key" --peer "$id" --ttl 24h --capacity 50 >"$GEN/mega-$id.cert" 2>/dev/null
	docker exec -i "$1" /overlayd promote --data-dir /data --cert - <"$GEN/mega-$id.cert" >/dev/null ||
		fail "promote $(cname "$1")"
}

# formed: the seed, every supernode and mega see all of them in their
# directory, the megas are certified, and every client is attached.
formed() {
	local want=$((1 + SUPERNODES + MEGAS)) c n=0
	for c in $(cids seed) $(cids supernode) $(cids mega); do
		[ "$(jget "$(status_json "$c")" directory_size)" = "$want" ] || return 1
		n=$((n + 1))
	done
	[ "$n" -eq "$want" ] || return 1
	for c in $(cids mega); do
		[ "$(jget "$(status_json "$c")" role)" = mega ] || return 1
	done
	clients_attached
}

# clients_attached [PEERID...]: every client has a session, with none of the given peers.
clients_attached() {
	local c sn x n=0
	for c in $(cids client); do
		sn=$(jget "$(status_json "$c")" supernode)
		[ -n "$sn" ] || return 1
		for x in "$@"; do [ "$sn" != "$x" ] || return 1; done
		n=$((n + 1))
	done
	[ "$n" -eq "$CLIENTS" ]
}

cmd_up() {
	local t0 c
	t0=$(date +%s)
	docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info)"
	mkdir -p "$GEN"
	swarm_init
	build
	setup
	log "deploying stack $STACK: seed, $SUPERNODES supernodes, $MEGAS megas, $CLIENTS clients"
	# --resolve-image never: the image is local, there is no registry to ask.
	docker stack deploy --resolve-image never -c "$HERE/stack.yml" "$STACK" >"$GEN/deploy.log" 2>&1 ||
		{ cat "$GEN/deploy.log" >&2; fail "docker stack deploy"; }
	poll "every task running and healthy ($(total))" 150 all_healthy
	log "every task healthy after $(($(date +%s) - t0))s; promoting the megas (certificates signed here)"
	for c in $(cids mega); do promote_mega "$c"; done
	poll "the network formed (full directories, megas certified, every client attached)" 90 formed
	log "formed in $(($(date +%s) - t0))s"
	cmd_status
}

# ---- status ---------------------------------------------------------------

cmd_status() {
	if [ -z "$(docker stack ls --format '{{.Name}}' 2>/dev/null | grep -x "$STACK")" ]; then
		echo "no stack $STACK: testnet.sh up deploys it"
		return 0
	fi
	docker service ls --filter "label=com.docker.stack.namespace=$STACK" --format 'table {{.Name}}\t{{.Mode}}\t{{.Replicas}}\t{{.Image}}'
	echo
	declare -A name_of=()
	local c js id svc
	for svc in seed supernode mega; do
		for c in $(cids $svc); do
			id=$(peer_of "$c") && [ -z "$id" ] || name_of[$id]=$(cname "$c")
		done
	done
	printf '%-13s %-9s %-10s %-10s %-9s %-4s %-8s %s\n' TASK HEALTH PEER ROLE LOAD DIR ADDR "SEMAPHORES / ATTACHED TO"
	for svc in seed supernode mega client; do
		for c in $(cids $svc); do
			js=$(status_json "$c")
			local health
			health=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c")
			if [ -z "$js" ]; then
				printf '%-13s %-9s %s\n' "$(cname "$c")" "$health" "(daemon not answering)"
				continue
			fi
			id=$(jget "$js" peer_id)
			local role load="-" more addr
			role=$(jget "$js" role)
			addr=$(docker inspect -f "{{with index .NetworkSettings.Networks \"$NETWORK\"}}{{.IPAddress}}{{end}}" "$c")
			if [ "$role" = ordinary ]; then
				local sn
				sn=$(jget "$js" supernode)
				more="-> ${name_of[$sn]:-${sn:-(detached)}} (failovers $(jget "$js" failovers))"
			else
				load="$(jget "$js" attached_clients)/$(jget "$js" capacity)"
				more=$(semaphores "$js")
			fi
			printf '%-13s %-9s %-10s %-10s %-9s %-4s %-8s %s\n' "$(cname "$c")" "$health" "12*${id: -6}" "$role" "$load" \
				"$(jget "$js" directory_size)" "$addr" "$more"
		done
	done
}

# ---- chaos ----------------------------------------------------------------

cmd_chaos() {
	[ -f "$GEN/operator.key" ] || fail "no $GEN/operator.key: testnet.sh up first"
	SUPERNODES=$(cids supernode | wc -l)
	MEGAS=$(cids mega | wc -l)
	CLIENTS=$(cids client | wc -l)
	[ "$CLIENTS" -ge 2 ] && [ "$SUPERNODES" -ge 2 ] && [ "$MEGAS" -ge 1 ] || fail "chaos needs a running stack: testnet.sh up"
	poll "the network formed before chaos" 60 formed

	# 1. Scale the supernode service down by ~30% (at least 1): swarm picks the tasks.
	local k=$(((SUPERNODES * 3 + 5) / 10)) c js before=() gone=() affected=() id sn x
	[ "$k" -ge 1 ] || k=1
	declare -A peer_of_c=() sn_of_client=()
	for c in $(cids supernode); do peer_of_c[$c]=$(peer_of "$c"); before+=("$c"); done
	for c in $(cids client); do sn_of_client[$c]=$(jget "$(status_json "$c")" supernode); done
	log "chaos 1/4: docker service scale ${STACK}_supernode=$((SUPERNODES - k)) (from $SUPERNODES; swarm picks the tasks)"
	docker service scale --detach "${STACK}_supernode=$((SUPERNODES - k))" >/dev/null 2>&1 || fail "docker service scale"
	scaled_down() { [ "$(cids supernode | wc -l)" -eq $((SUPERNODES - k)) ]; }
	poll "$k supernode task(s) gone" 60 scaled_down
	for c in "${before[@]}"; do
		cids supernode | grep -qx "$c" || gone+=("${peer_of_c[$c]}")
	done
	for c in "${!sn_of_client[@]}"; do
		for x in "${gone[@]}"; do [ "${sn_of_client[$c]}" != "$x" ] || affected+=("$c"); done
	done
	log "  removed ${gone[*]}, which served ${#affected[@]} client(s)"
	[ ${#affected[@]} -gt 0 ] || log "  (the removed task served no client: this round checks only that nobody is left detached)"
	poll "every client attached to a running supernode after the scale-down" 60 clients_attached "${gone[@]}"
	for c in "${affected[@]}"; do
		js=$(status_json "$c")
		log "  $(cname "$c") re-attached to $(jget "$js" supernode | tail -c 7) (failovers $(jget "$js" failovers))"
	done
	log "  every client attached to a running supernode"
	log "  scaling back to $SUPERNODES (new tasks: new identities)"
	docker service scale --detach "${STACK}_supernode=$SUPERNODES" >/dev/null 2>&1 || fail "docker service scale"
	scaled_up() {
		local c n=0
		for c in $(cids supernode); do
			[ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$c")" = healthy ] || return 1
			n=$((n + 1))
		done
		[ "$n" -eq "$SUPERNODES" ]
	}
	poll "the supernode service back at $SUPERNODES healthy tasks" 90 scaled_up
	poll "the network formed again after the scale-up" 90 formed

	# 2. Hand a mega-supernode back (demote), then promote it again.
	local mega mid
	# The most loaded one, so that the hand-back moves clients when there are any.
	mega=$(for c in $(cids mega); do printf '%s %s\n' "$(jget "$(status_json "$c")" attached_clients)" "$c"; done | sort -rn | head -n1 | awk '{print $2}')
	mid=$(peer_of "$mega")
	log "chaos 2/4: demoting $(cname "$mega") (serving $(jget "$(status_json "$mega")" attached_clients) clients)"
	ovl "$mega" demote --data-dir /data >/dev/null || fail "demote $(cname "$mega")"
	is_role() { [ "$(jget "$(status_json "$mega")" role)" = "$1" ]; }
	poll "$(cname "$mega") back to a regular supernode" 30 is_role supernode
	within_capacity() {
		local j
		j=$(status_json "$mega")
		[ "$(jget "$j" attached_clients)" -le "$(jget "$j" capacity)" ] && clients_attached
	}
	poll "$(cname "$mega") within its own capacity, every client attached" 60 within_capacity
	log "  demoted: role supernode, $(jget "$(status_json "$mega")" attached_clients)/$(jget "$(status_json "$mega")" capacity) clients; promoting again"
	promote_mega "$mega"
	poll "$(cname "$mega") a mega-supernode again" 30 is_role mega
	poll "the network formed after the promotion" 60 formed
	log "  $(cname "$mega") ($mid) is a mega-supernode again"

	# 3 and 4. A group message to every client, a direct message between two.
	local clients=()
	mapfile -t clients < <(cids client)
	chaos_messages "$GROUP" "${clients[@]}"
	log "chaos passed"
}

# ---- down -----------------------------------------------------------------

cmd_down() {
	local ids
	if docker stack ls --format '{{.Name}}' 2>/dev/null | grep -qx "$STACK"; then
		docker stack rm "$STACK" >/dev/null 2>&1 || true
	fi
	# stack rm returns at once: the tasks stop and the network goes after them.
	stack_gone() {
		[ -z "$(docker ps -aq --filter "label=com.docker.stack.namespace=$STACK")" ] &&
			! docker network inspect "$NETWORK" >/dev/null 2>&1
	}
	poll "the stack's containers and network removed" 60 stack_gone
	docker secret inspect "$SECRET" >/dev/null 2>&1 && docker secret rm "$SECRET" >/dev/null
	ids=$(docker volume ls -q --filter "label=com.docker.stack.namespace=$STACK")
	[ -z "$ids" ] || docker volume rm $ids >/dev/null
	docker image inspect "$IMAGE" >/dev/null 2>&1 && docker rmi -f "$IMAGE" >/dev/null
	if [ -f "$GEN/swarm-initialised" ]; then
		docker swarm leave --force >/dev/null
		# The engine made docker_gwbridge for the swarm; it stays after leave.
		if [ -f "$GEN/gwbridge-created" ] && docker network inspect docker_gwbridge >/dev/null 2>&1; then
			docker network rm docker_gwbridge >/dev/null
		fi
		log "down: left the swarm that up initialised"
	fi
	rm -rf "$GEN"
	log "down: stack $STACK, secret $SECRET, network $NETWORK, image $IMAGE and $GEN removed"
}

# ---- smoke ----------------------------------------------------------------

cmd_smoke() { smoke 240 "label=com.docker.stack.namespace=$STACK"; }

case "${1:-}" in
up) cmd_up ;;
status) cmd_status ;;
chaos) cmd_chaos ;;
down) cmd_down ;;
smoke) cmd_smoke ;;
_up_chaos)
	cmd_up
	cmd_chaos
	;;
*)
	sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
	;;
esac
