#!/usr/bin/env bash
# runc with the capabilities this machine's bounding set lacks left out of
# the container's spec. Docker (20.10) grants a --privileged container every
# capability the kernel knows, and runc fails ("unable to apply caps:
# operation not permitted") when the bounding set of the VM it runs in
# lacks one (CAP_SYS_RESOURCE here). This grants what the host has and
# nothing more: a capability outside the bounding set cannot be had anyway.
# hack/docker/up.sh makes it dockerd's default runtime.
set -euo pipefail
bundle=. cmd='' process=''
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
	case ${args[i]} in
	--bundle | -b) bundle=${args[i + 1]}; i=$((i + 1)) ;;
	--bundle=*) bundle=${args[i]#--bundle=} ;;
	--process | -p) process=${args[i + 1]}; i=$((i + 1)) ;;
	--process=*) process=${args[i]#--process=} ;;
	# Global options with a value (runc --root X --log Y create ...).
	--root | --log | --log-format | --criu | --console-socket | --pid-file) i=$((i + 1)) ;;
	create | run | exec) [[ -n $cmd ]] || cmd=${args[i]} ;;
	esac
done
# bounded <file> <jq path of the capabilities object>: the capability lists
# in the file keep only what the bounding set has.
bounded() {
	local bnd have tmp
	bnd=$(awk '$1 == "CapBnd:" {print $2}' /proc/self/status)
	# capsh prints "0x...=cap_chown,cap_dac_override,..."
	have=$(capsh --decode="$bnd" | sed 's/^[^=]*=//' | tr '[:lower:]' '[:upper:]' | jq -Rc 'split(",")')
	tmp=$(mktemp "$1.XXXXXX")
	jq --argjson have "$have" \
		"if $2 then $2 |= map_values(map(select(. as \$c | \$have | index(\$c)))) else . end" \
		"$1" >"$tmp"
	mv "$tmp" "$1"
}
case $cmd in
create | run) [[ ! -f $bundle/config.json ]] || bounded "$bundle/config.json" .process.capabilities ;;
# docker exec hands runc the process to start in a file of its own.
exec) [[ -z $process || ! -f $process ]] || bounded "$process" .capabilities ;;
esac
exec runc "$@"
