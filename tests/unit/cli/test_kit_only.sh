#!/usr/bin/env bash
# test_kit_only.sh — `onyx test --provider P --only` is exclusive: P alone runs
# each case, whatever the config lists, so a case that ran any node elsewhere
# can never be a pass.
#
# usage: test_kit_only.sh ONYX MAKE_MODELS WORKDIR
# Needs the CPU and fake providers (tests/providers/fake: float32 Add, Mul and
# Relu by default) where ONYX_PROVIDER_PATH points (ctest sets it). The cases
# are make_models' kit/ suite; their expected outputs are worked out by hand
# (or with libm for Sigmoid) in make_models.c, not taken from Onyx's output.
set -u
ONYX="$1"
MAKE_MODELS="$2"
WORK="$3"
failures=0
checks=0
TAB=$(printf '\t')

rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$MAKE_MODELS" "$WORK/m" || { echo "FAIL: make_models"; exit 1; }
KIT="$WORK/m/kit"
OUT="$WORK/stdout"
ERR="$WORK/stderr"

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

expect_line() {
  checks=$((checks + 1))
  grep -qxF -- "$2" "$1" || fail "no line '$2' in $(basename "$1")"
}

expect_grep() {
  checks=$((checks + 1))
  grep -qE -- "$2" "$1" || fail "no match for /$2/ in $(basename "$1")"
}

# verdict TEST: the verdict of TEST in $OUT.
verdict() { grep "^$1${TAB}" "$OUT" | cut -f2-; }

# A case may say pass only if every node of it ran on the provider.
no_false_pass() {
  for t in test_kit_sigmoid test_kit_add_sigmoid test_kit_add_int32 test_kit_if_sigmoid \
    test_kit_seq_only; do
    checks=$((checks + 1))
    case "$(verdict "$t")" in
      not-claimed:*) ;;
      *) fail "$t: '$(verdict "$t")', expected not-claimed ($*)" ;;
    esac
  done
}

# --- The documented kit command: a config that lists the provider and the CPU ----------------
printf '{"providers": [{"name": "fake"}, {"name": "cpu"}]}\n' >"$WORK/fake_cpu.json"
expect_rc 0 test "$KIT" --config "$WORK/fake_cpu.json" --provider fake --only \
  --verdicts "$WORK/v.txt"
no_false_pass "config [fake, cpu]"
# The decline reason of the provider is in the verdict, with the count of nodes left.
expect_line "$OUT" "test_kit_sigmoid${TAB}not-claimed: provider 'fake' did not claim 1 of 1 nodes (Sigmoid); node 'sig0' (Sigmoid v13): fake: fake device: op not supported"
expect_line "$OUT" "test_kit_add_sigmoid${TAB}not-claimed: provider 'fake' did not claim 1 of 2 nodes (Sigmoid); node 'sig0' (Sigmoid v13): fake: fake device: op not supported"
expect_grep "$OUT" "^test_kit_add_int32${TAB}not-claimed: provider 'fake' did not claim 1 of 1 nodes \(Add\); node 'add0' \(Add v[0-9]+\): fake: fake device: op not supported \(.+\)$"
# A node of a subgraph is the provider's too.
expect_line "$OUT" "test_kit_if_sigmoid${TAB}not-claimed: provider 'fake': node 'if0' (If): subgraph 'then_branch': no provider can run node 'then_node' (Sigmoid v13): fake: fake device: op not supported"
# What the provider takes whole passes, host ops (sequences, If) beside it too.
expect_line "$OUT" "test_kit_mul${TAB}pass"
expect_line "$OUT" "test_kit_seq_add${TAB}pass"
expect_line "$OUT" "test_kit_if${TAB}pass"
# Host ops alone ran nothing on the provider: not a pass of it.
expect_line "$OUT" "test_kit_seq_only${TAB}not-claimed: provider 'fake' ran none of the 2 nodes (host ops only: the host runs them)"
expect_line "$OUT" "provider fake: 5 cases not claimed"
expect_line "$OUT" "3 passed, 0 failed, 5 skipped"
checks=$((checks + 1))
head -n 8 "$OUT" | cmp -s - "$WORK/v.txt" || fail "stdout progress differs from the verdict file"

# --strict: not claimed is a failure.
expect_rc 1 test "$KIT" --config "$WORK/fake_cpu.json" --provider fake --only --strict
expect_line "$OUT" "3 passed, 5 failed, 0 skipped"

# --- The provider's options come from the config; everything else of it is dropped -----------
# ops=Add,Sigmoid: the provider takes the float cases with Sigmoid; Mul (in test_kit_mul and
# the else branches of the If cases) is not among its ops.
# The CPU pin and fallback deny would fail an exclusive session if they were kept.
cat >"$WORK/fake_opts.json" <<'EOF'
{"providers": [{"name": "fake", "required": false, "options": {"ops": "Add,Sigmoid"}},
               {"name": "cpu"}],
 "placement": [{"op_type": "Mul", "provider": "cpu"}, {"op_type": "Sigmoid", "provider": "fake"}],
 "fallback": "deny"}
EOF
expect_rc 0 test "$KIT" --config "$WORK/fake_opts.json" --provider fake --only
expect_line "$OUT" "test_kit_sigmoid${TAB}pass"
expect_line "$OUT" "test_kit_add_sigmoid${TAB}pass"
expect_grep "$OUT" "^test_kit_mul${TAB}not-claimed: provider 'fake' did not claim 1 of 1 nodes \(Mul\); "
expect_grep "$OUT" "^test_kit_add_int32${TAB}not-claimed: "
expect_grep "$OUT" "^test_kit_if${TAB}not-claimed: provider 'fake': node 'if0' \(If\): subgraph 'else_branch': no provider can run node 'else_mul' "
expect_line "$OUT" "test_kit_seq_add${TAB}pass"
expect_line "$OUT" "3 passed, 0 failed, 5 skipped"

# --- Any provider order, and no config at all, give the same verdicts -------------------------
printf '{"providers": [{"name": "cpu"}, {"name": "fake"}]}\n' >"$WORK/cpu_fake.json"
expect_rc 0 test "$KIT" --config "$WORK/cpu_fake.json" --provider fake --only
no_false_pass "config [cpu, fake]"
expect_line "$OUT" "test_kit_mul${TAB}pass"
expect_rc 0 test "$KIT" --provider fake --only
no_false_pass "no config"
expect_line "$OUT" "3 passed, 0 failed, 5 skipped"
# A config without the provider: loaded by name, the config's providers dropped.
printf '{"providers": [{"name": "cpu"}]}\n' >"$WORK/cpu.json"
expect_rc 0 test "$KIT" --config "$WORK/cpu.json" --provider fake --only
no_false_pass "config [cpu]"
expect_line "$OUT" "3 passed, 0 failed, 5 skipped"

# --- Without --only the CPU takes what the provider leaves: every case passes ----------------
expect_rc 0 test "$KIT" --config "$WORK/fake_cpu.json" --provider fake
expect_line "$OUT" "test_kit_sigmoid${TAB}pass"
expect_line "$OUT" "test_kit_add_int32${TAB}pass"
expect_line "$OUT" "test_kit_if_sigmoid${TAB}pass"
expect_line "$OUT" "8 passed, 0 failed, 0 skipped"

# --- A provider that cannot be loaded is a load error naming it, not a skip ----------------------
printf '{"providers": [{"name": "nosuchep", "required": false}, {"name": "cpu"}]}\n' >"$WORK/missing.json"
expect_rc 1 test "$KIT" --filter mul --config "$WORK/missing.json" --provider nosuchep --only
expect_grep "$OUT" "^test_kit_mul${TAB}load-error: .*nosuchep"

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
