#!/usr/bin/env bash
# Runs `envoy --mode validate` and `courier --mode validate` on every bootstrap
# (*.yaml, *.yml, *.json) directly inside DIR, from DIR (so relative certificate
# paths resolve there), and prints one line per file and the counts:
#
#   file  envoy  courier  courier's errors (when it refuses)
#
# Usage: scripts/sweep-envoy-examples.sh DIR [DIR...]
#   ENVOY    Envoy binary   (default: .venv/bin/envoy of this repository)
#   COURIER  courier binary (default: target/debug/courier, or
#            $CARGO_TARGET_DIR/debug/courier)
#
# The inputs (Envoy's configs/ folder, the envoyproxy/examples repository) are
# not part of this repository: copy them into a scratch folder first.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
envoy=${ENVOY:-$root/.venv/bin/envoy}
[ -x "$envoy" ] || envoy=$(command -v envoy || echo "$envoy")
courier=${COURIER:-${CARGO_TARGET_DIR:-$root/target}/debug/courier}
[ $# -ge 1 ] || { echo "usage: $0 DIR [DIR...]" >&2; exit 2; }
[ -x "$envoy" ] || { echo "no envoy at $envoy (set ENVOY)" >&2; exit 2; }
[ -x "$courier" ] || { echo "no courier at $courier (set COURIER)" >&2; exit 2; }

total=0 envoy_ok=0 courier_ok=0 both=0 courier_only=0
refusals=()
for dir in "$@"; do
    dir=$(cd "$dir" && pwd)
    for f in "$dir"/*.yaml "$dir"/*.yml "$dir"/*.json; do
        [ -f "$f" ] || continue
        name=${f#"$dir"/}
        total=$((total + 1))
        e=refuses c=refuses why=""
        if (cd "$dir" && timeout 60 "$envoy" --mode validate -c "$f" >/dev/null 2>&1); then
            e=accepts
            envoy_ok=$((envoy_ok + 1))
        fi
        out=$(cd "$dir" && timeout 60 "$courier" --mode validate -c "$f" 2>&1)
        if [ $? -eq 0 ]; then
            c=accepts
            courier_ok=$((courier_ok + 1))
        else
            # Every error, without the summary line, joined on one line.
            why=$(printf '%s\n' "$out" | grep '^error: ' | grep -v "^error: invalid configuration" |
                sed 's/^error: //' | paste -sd'|' - | sed 's/|/ | /g')
            [ -n "$why" ] || why=$(printf '%s\n' "$out" | head -n1)
        fi
        if [ $e = accepts ] && [ $c = accepts ]; then
            both=$((both + 1))
        elif [ $e = refuses ] && [ $c = accepts ]; then
            courier_only=$((courier_only + 1))
        elif [ $e = accepts ]; then
            refusals+=("$name: $why")
        fi
        printf '%-55s envoy %-8s courier %-8s %s\n' "$name" "$e" "$c" "$why"
    done
done
echo
echo "files: $total"
echo "envoy accepts: $envoy_ok"
echo "courier accepts: $courier_ok (of them $both also accepted by envoy, $courier_only refused by envoy)"
echo "accepted by envoy, refused by courier: ${#refusals[@]}"
for r in "${refusals[@]}"; do echo "  $r"; done
