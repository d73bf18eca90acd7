# shellcheck shell=bash
# What the container testnets' scripts share (testnet/compose/testnet.sh,
# testnet/swarm/testnet.sh), sourced by both after `set -euo pipefail`:
# logging and failing, the poll with a deadline, the overlayd binary run
# inside a container and reading its status, building the binary and the
# FROM-scratch image, the messaging steps of chaos (a group message to every
# client, a direct message between two) and smoke (up and chaos under a
# timeout, down also on failure).
#
# It defines functions only, and starts, builds or removes nothing when
# sourced. Each script sets, before sourcing it:
#
#   NAME      the prefix of failure messages ("testnet", "swarm testnet")
#   ROOT      the repository; GEN, the script's generated directory; HERE,
#             the script's directory (its Dockerfile); IMAGE, the image's tag
#   OVL_DATA  extra arguments for overlayd commands run in a container
#             (empty, or --data-dir /data)
#   F         (optional) the deadline factor dl multiplies by, default 1
#
# and defines cmd_up, cmd_chaos, cmd_status, cmd_down and cname CID (a
# container's name in messages), which smoke and the chaos steps call.

log() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }
fail() { printf '%s: FAIL: %s\n' "$NAME" "$*" >&2; exit 1; }

# dl SECONDS prints a deadline scaled by the factor F (1 when unset).
dl() { echo $(($1 * ${F:-1})); }

# poll WHAT DEADLINE CMD... runs CMD until it succeeds or DEADLINE seconds
# pass; the interval is 0.5 s. WHAT names the condition in the failure.
poll() {
	local what=$1 deadline=$2
	shift 2
	local end=$(($(date +%s) + deadline))
	until "$@"; do
		if [ "$(date +%s)" -ge "$end" ]; then
			fail "timed out after ${deadline}s waiting for: $what"
		fi
		sleep 0.5 # poll interval, not synchronisation
	done
}

# ovl CID ARGS... runs the overlayd binary inside a container: scratch has
# no shell.
ovl() { docker exec "$1" /overlayd "${@:2}"; }
# status_json CID prints the daemon's status, or nothing when it does not answer.
status_json() { ovl "$1" status --json "${OVL_DATA[@]}" 2>/dev/null || true; }
# jget JSON KEY prints the first value of "KEY" in pretty-printed JSON.
jget() {
	sed -n -e "s/^ *\"$2\": \"\(.*\)\",\{0,1\}\$/\1/p" -e "s/^ *\"$2\": \([^\",{[]*\),\{0,1\}\$/\1/p" <<<"$1" | head -n1
}
# semaphores JSON prints "name in_use/max" for each semaphore.
semaphores() {
	awk -F': ' '/"name":/ {gsub(/[",]/, "", $2); n=$2} /"in_use":/ {gsub(/,/, "", $2); u=$2}
		/"max":/ {gsub(/,/, "", $2); printf "%s%s %s/%s", sep, n, u, $2; sep=", "}' <<<"$1"
}
# peer_of CID prints the container daemon's peer ID.
peer_of() { jget "$(status_json "$1")" peer_id; }

# ---- build ----------------------------------------------------------------

# build_binary builds the static overlayd binary into GEN/image, beside a
# copy of HERE/Dockerfile: the image's build context.
build_binary() {
	log "building the static binary and the image $IMAGE"
	mkdir -p "$GEN/image"
	(cd "$ROOT" && CGO_ENABLED=0 go build -buildvcs=auto -o "$GEN/image/overlayd" ./cmd/overlayd)
	cp "$HERE/Dockerfile" "$GEN/image/Dockerfile"
}

# build_image LABEL builds IMAGE from GEN/image, labelled LABEL (key=value)
# so that down finds it.
build_image() {
	# The classic builder: buildx may be missing, and FROM scratch needs nothing of BuildKit.
	DOCKER_BUILDKIT=0 docker build -q -t "$IMAGE" --label "$1" "$GEN/image" >/dev/null 2>"$GEN/image/build.log" ||
		{ cat "$GEN/image/build.log" >&2; fail "docker build"; }
}

# ---- chaos: messages ------------------------------------------------------

# chaos_messages GROUP CID... is chaos's steps 3 and 4 over the client
# containers given: every client joins GROUP and listens, the first
# publishes, and every one must receive it once; then a direct message from
# the first client to another, on a different supernode if any, must be
# acknowledged and received. The listeners' output is in GEN/chaos.
# (The conditions it defines are called by poll: SC2317 does not see it.)
# shellcheck disable=SC2317
chaos_messages() {
	local group=$1
	shift
	# 3. Group message: every client joins, listens; one publishes; all receive.
	local out=$GEN/chaos nodes=("$@") pids=() i nonce c
	rm -rf "$out"
	mkdir -p "$out"
	nonce=$(date +%s%N)
	log "chaos 3/4: ${#nodes[@]} clients join group $group; $(cname "${nodes[0]}") publishes"
	for c in "${nodes[@]}"; do ovl "$c" group join "${OVL_DATA[@]}" "$group" >/dev/null; done
	members_known() {
		local n
		n=$(ovl "${nodes[0]}" group members "${OVL_DATA[@]}" --json "$group" 2>/dev/null | grep -c '"12D3' || true)
		[ "$n" -eq "${#nodes[@]}" ]
	}
	poll "the group's home to know all ${#nodes[@]} members" "$(dl 30)" members_known
	for i in "${!nodes[@]}"; do
		ovl "${nodes[$i]}" listen "${OVL_DATA[@]}" --ready --count 1 --timeout "$(dl 45)s" >"$out/group-$i.jsonl" 2>"$out/group-$i.err" &
		pids+=($!)
	done
	listeners_ready() {
		local i
		for i in "${!nodes[@]}"; do grep -qx ready "$out/group-$i.err" 2>/dev/null || return 1; done
	}
	poll "every listener to be ready" "$(dl 30)" listeners_ready
	# One publish must reach every member.
	ovl "${nodes[0]}" group publish "${OVL_DATA[@]}" "$group" "group-$nonce" >>"$out/publish.log" 2>&1 ||
		fail "group publish failed: $(tail -n1 "$out/publish.log")"
	all_received() {
		local i
		for i in "${!nodes[@]}"; do grep -q "group-$nonce" "$out/group-$i.jsonl" 2>/dev/null || return 1; done
	}
	poll "every client to receive the group message" "$(dl 30)" all_received || true
	for p in "${pids[@]}"; do wait "$p" || true; done
	local missing=()
	for i in "${!nodes[@]}"; do
		grep -q "\"kind\": *\"group\"" "$out/group-$i.jsonl" && grep -q "group-$nonce" "$out/group-$i.jsonl" || missing+=("$(cname "${nodes[$i]}")")
	done
	[ ${#missing[@]} -eq 0 ] || fail "group message not received by ${missing[*]}; see $out"
	log "  every client received the one group message ($(tail -n1 "$out/publish.log"))"

	# 4. Direct message between two clients, on different supernodes if any.
	local a="${nodes[0]}" b="" sa bid lp
	sa=$(jget "$(status_json "$a")" supernode)
	for c in "${nodes[@]:1}"; do
		b=$c
		[ "$(jget "$(status_json "$c")" supernode)" = "$sa" ] || break
	done
	bid=$(peer_of "$b")
	log "chaos 4/4: direct message $(cname "$a") -> $(cname "$b")"
	ovl "$b" listen "${OVL_DATA[@]}" --ready --count 1 --timeout 45s >"$out/direct.jsonl" 2>"$out/direct.err" &
	lp=$!
	direct_ready() { grep -qx ready "$out/direct.err" 2>/dev/null; }
	poll "the recipient's listener to be ready" 30 direct_ready
	ovl "$a" send "${OVL_DATA[@]}" "$bid" "direct-$nonce" >>"$out/send.log" 2>&1 ||
		fail "direct message $(cname "$a") -> $(cname "$b") not acknowledged: $(tail -n1 "$out/send.log")"
	wait "$lp" || true
	grep -q "\"kind\": *\"direct\"" "$out/direct.jsonl" && grep -q "direct-$nonce" "$out/direct.jsonl" ||
		fail "direct message acknowledged but not printed by $(cname "$b")'s listener; see $out"
	log "  delivered and received once ($(tail -n1 "$out/send.log"))"
}

# ---- smoke ----------------------------------------------------------------

# smoke LIMIT FILTER runs the script's up and chaos in a child bounded by
# SMOKE_TIMEOUT seconds (LIMIT when unset), then down, also on failure; on
# a failure it prints the status and the last log lines of up to 20
# containers matching the docker ps FILTER, and exits with the child's
# status.
smoke() {
	local t0 rc=0 limit=${SMOKE_TIMEOUT:-$1} filter=$2
	t0=$(date +%s)
	trap 'cmd_down || true' EXIT
	timeout -k 20 "$limit" bash "$0" _up_chaos || rc=$?
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		echo "$NAME: FAIL: smoke test exceeded ${limit}s" >&2
	fi
	if [ "$rc" -ne 0 ]; then
		cmd_status 2>/dev/null || true
		log "logs of the last failure (tail):"
		for c in $(docker ps -aq --filter "$filter" | head -n 20); do
			docker logs --tail 3 "$c" 2>&1 | sed "s|^|  $(cname "$c"): |"
		done
		echo "$NAME: smoke FAILED (exit $rc) after $(($(date +%s) - t0))s" >&2
		exit "$rc"
	fi
	cmd_down
	trap - EXIT
	log "smoke passed in $(($(date +%s) - t0))s"
}
