#!/usr/bin/env bash
# test_devices.sh — tests of `onyx devices` (docs/cli.md).
#
# usage: test_devices.sh ONYX LIBDIR WORKDIR
# LIBDIR is the build's lib folder: libonyx.so, the fake and CPU providers,
# broken/ (tests/providers/broken) and score/ (tests/unit/providers). The
# expected lines follow the output format of docs/cli.md and the providers'
# sources (names, vendors, versions, memories), not a run of the command.
set -u
ONYX="$1"
LIB="$(cd "$2" && pwd -P)" || exit 1
WORK="$3"
failures=0
checks=0

rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
OUT="$WORK/stdout"
ERR="$WORK/stderr"
BLOCK="$WORK/block"

fail() {
  echo "FAIL: $*"
  echo "--- stdout:"; cat "$OUT"
  echo "--- stderr:"; cat "$ERR"
  failures=$((failures + 1))
}

# expect_rc CODE ARGS...: runs onyx ARGS, checks its exit status.
expect_rc() {
  local want="$1"
  shift
  checks=$((checks + 1))
  "$ONYX" "$@" >"$OUT" 2>"$ERR"
  local rc=$?
  [ "$rc" -eq "$want" ] || fail "onyx $* exited $rc, expected $want"
}

# expect_line FILE LINE: FILE holds exactly this line.
expect_line() {
  checks=$((checks + 1))
  grep -qxF -- "$2" "$1" || fail "no line '$2' in $(basename "$1")"
}

expect_grep() {
  checks=$((checks + 1))
  grep -qE -- "$2" "$1" || fail "no match for /$2/ in $(basename "$1")"
}

# block LIBRARY: the lines of stdout describing the library at that path
# (from its "provider" line to the next one) go to $BLOCK.
block() {
  awk -v want="  library: $1" '
    /^provider / || /^[0-9]+ providers?, / { if (hit) exit; buf = "" }
    { buf = buf $0 "\n"; if ($0 == want) hit = 1 }
    END { if (hit) printf "%s", buf }' "$OUT" >"$BLOCK"
  checks=$((checks + 1))
  [ -s "$BLOCK" ] || fail "no entry for $1"
}

# --- usage ----------------------------------------------------------------------------------
expect_rc 0 --help
expect_grep "$OUT" "^  devices +list provider libraries"
expect_rc 0 devices --help
expect_grep "$OUT" "^usage: onyx devices \[--config FILE\]"
expect_rc 2 devices extra
expect_grep "$ERR" "unexpected argument 'extra'"
expect_rc 2 devices --bogus

# --- the search path ----------------------------------------------------------------------------
export ONYX_PROVIDER_PATH="$LIB"
expect_rc 0 devices
block "$LIB/libonyx_ep_fake.so"
expect_line "$BLOCK" "provider fake: 1 device"
expect_line "$BLOCK" "  vendor: Onyx tests, version 1.0, score 0"
expect_line "$BLOCK" "  device 0: Fake accelerator"
expect_line "$BLOCK" "    memory: other, vendor 0xfa4e, device 0, size unknown"
expect_line "$BLOCK" "    kind: test"
block "$LIB/libonyx_ep_cpu.so"
expect_line "$BLOCK" "provider cpu: 1 device"
expect_line "$BLOCK" "  vendor: onyx, version 0.1.0, score 0"
expect_line "$BLOCK" "  device 0: host CPU"
expect_line "$BLOCK" "    memory: cpu, vendor 0x0000, device 0, size unknown"
checks=$((checks + 1))
tail -n 1 "$OUT" | grep -qE '^[0-9]+ providers?, [0-9]+ devices?$' || fail "no summary line last"

# A GPU provider where built: its devices, or zero with the driver's reason.
for gpu in cuda rocm; do
  [ -f "$LIB/libonyx_ep_$gpu.so" ] || { echo "note: $gpu provider not built"; continue; }
  block "$LIB/libonyx_ep_$gpu.so"
  if grep -qxF "provider $gpu: no device" "$BLOCK"; then
    expect_grep "$BLOCK" "^  reason: $gpu: no .+ \(NO_DEVICE\)$"
  else
    expect_grep "$BLOCK" "^provider $gpu: [1-9][0-9]* devices?$"
    expect_grep "$BLOCK" "^    compute_capability: [0-9]"
  fi
  echo "note: $(head -n 1 "$BLOCK")"
done

# Broken libraries are listed with their load errors; the listing succeeds.
ONYX_PROVIDER_PATH="$LIB/broken" expect_rc 0 devices
block "$LIB/broken/libonyx_ep_nosym.so"
expect_line "$BLOCK" "provider nosym: not loaded"
expect_line "$BLOCK" "  reason: provider library '$LIB/broken/libonyx_ep_nosym.so' has no entry symbol 'onyx_provider_init' (not an Onyx provider, or built without ONYX_EXPORT) (FAIL)"
block "$LIB/broken/libonyx_ep_initerr.so"
expect_line "$BLOCK" "provider initerr: not loaded"
expect_line "$BLOCK" "  reason: provider library '$LIB/broken/libonyx_ep_initerr.so': onyx_provider_init failed: no widget attached (broken on purpose) (NO_DEVICE)"
block "$LIB/broken/libonyx_ep_good.so"
expect_line "$BLOCK" "provider good: 1 device"

# Several libraries of one name: the highest score is used; zero devices is information.
ONYX_PROVIDER_PATH="$LIB/score/low:$LIB/score/high:$LIB/score/neg:$LIB/score/misc" expect_rc 0 devices
block "$LIB/score/low/libonyx_ep_scored.so"
expect_line "$BLOCK" "provider scored: 1 device"
expect_line "$BLOCK" "  vendor: score tests, version low, score 1"
expect_line "$BLOCK" "  not used: sessions load $LIB/score/high/libonyx_ep_scored.so"
block "$LIB/score/high/libonyx_ep_scored.so"
expect_line "$BLOCK" "  vendor: score tests, version high, score 5"
checks=$((checks + 1))
grep -q "not used" "$BLOCK" && fail "the library of highest score is marked not used"
block "$LIB/score/neg/libonyx_ep_scored.so"
expect_line "$BLOCK" "provider scored: no device"
expect_line "$BLOCK" "  reason: score -1: the provider cannot run on this machine (NO_DEVICE)"
block "$LIB/score/misc/libonyx_ep_zerodev.so"
expect_line "$BLOCK" "provider zerodev: no device"
expect_line "$BLOCK" "  reason: the provider reports zero devices (NO_DEVICE)"
block "$LIB/score/misc/libonyx_ep_twodev.so"
expect_line "$BLOCK" "provider twodev: 2 devices"
expect_line "$BLOCK" "  device 1: host CPU"

# --- a config --------------------------------------------------------------------------------
printf '{"providers": [{"name": "fake"}]}\n' >"$WORK/fake.json"
expect_rc 0 devices --config "$WORK/fake.json"
checks=$((checks + 1))
[ "$(grep '^provider ' "$OUT" | tr '\n' '|')" = "provider fake: 1 device|provider cpu: 1 device|" ] ||
  fail "--config: expected fake, then the implicit cpu"
expect_line "$OUT" "2 providers, 2 devices"

printf '{"providers": [{"name": "scored"}, {"name": "zerodev", "required": false}], "implicit_cpu": false}\n' \
  >"$WORK/scored.json"
ONYX_PROVIDER_PATH="$LIB/score/low:$LIB/score/high:$LIB/score/misc" expect_rc 0 devices --config "$WORK/scored.json"
expect_line "$OUT" "  library: $LIB/score/high/libonyx_ep_scored.so"
expect_line "$OUT" "provider zerodev: no device"
expect_line "$OUT" "2 providers, 1 device"

printf '{"providers": [\n' >"$WORK/bad.json"
expect_rc 1 devices --config "$WORK/bad.json"
expect_grep "$ERR" "^onyx devices: .*bad\.json:[0-9]+:[0-9]+: "
printf '{"providers": [{"nme": "fake"}]}\n' >"$WORK/typo.json"
expect_rc 1 devices --config "$WORK/typo.json"
expect_grep "$ERR" "typo\.json: providers\[0\]\.nme: unknown key; did you mean 'name'\?"
expect_rc 1 devices --config "$WORK/no_such.json"
expect_grep "$ERR" "no_such\.json"

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
