#!/usr/bin/env bash
# Builds every cargo-fuzz target in fuzz/ and runs each for FUZZ_SECONDS
# (default 60) from its seed corpus; fails on a crash, panic, timeout or leak.
# New inputs go to a scratch corpus (not fuzz/corpus); findings to fuzz/artifacts/.
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh            # all targets, 10 min each
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh http1      # one target
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
export CARGO_TERM_COLOR=never
# cargo-fuzz passes nightly-only flags (-Z sanitizer, -C passes=sancov): the
# stable compiler takes them with RUSTC_BOOTSTRAP=1.
export RUSTC_BOOTSTRAP=1
# libfuzzer-sys compiles libFuzzer (C++).
if ! command -v c++ >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq g++
fi
if ! command -v cargo-fuzz >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo-fuzz" ]; then
  cargo install cargo-fuzz --version =0.13.2 --locked
fi
FUZZ="$(command -v cargo-fuzz || echo "$HOME/.cargo/bin/cargo-fuzz")"
# No sanitizer: courier is safe Rust; panics, hangs and OOMs are what is hunted,
# and uninstrumented builds run several times faster.
SAN=(-s none)
TARGET_DIR="${FUZZ_TARGET_DIR:-target}"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <("$FUZZ" list)
fi
"$FUZZ" build "${SAN[@]}" --target-dir "$TARGET_DIR"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  echo "fuzz: $t for ${SECONDS_EACH}s"
  status=0
  "$FUZZ" run "${SAN[@]}" --target-dir "$TARGET_DIR" "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$scratch/$t.log" 2>&1 || status=$?
  grep -E "^Done|stat::number_of_executed_units" "$scratch/$t.log" || true
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t failed (exit $status); the input is in fuzz/artifacts/$t/" >&2
    tail -n 40 "$scratch/$t.log" >&2
    exit 1
  fi
done
echo "fuzz: ${#targets[@]} targets clean"
