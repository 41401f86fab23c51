# The verbs conformance suite (nvmf_verbs::conformance, the same functions `cargo test`
# runs on the soft provider) on the rdma-sys provider over soft-RoCE: both ends of every
# connection on rxe0 in this guest. The runner prints one line per property: PASS, FAIL with the
# reason, or N/A with why the provider cannot offer it; any FAIL fails the case.
. "$INTEROP/lib.sh"
R="$BIN/verbs-conformance"
check "the runner was built (cargo build --release -p nvmf-verbs --example verbs-conformance)" "[ -x '$R' ]"
echo "+ $R rdma $GUEST_IP"
rc=0
timeout 900 "$R" rdma "$GUEST_IP" > "$LOG/conformance.log" 2>&1 || rc=$?
cat "$LOG/conformance.log"
check "no property failed" "! grep -q '^FAIL' '$LOG/conformance.log'"
check "the runner exited 0 (it exits non-zero on any failure)" "[ $rc -eq 0 ]"
check "the runner reported its summary with no failure" \
  "grep -qE '^verbs conformance: [1-9][0-9]* passed, 0 failed' '$LOG/conformance.log'"
# The rdma-sys provider lacks exactly one thing: remotely invalidatable regions.
check "only send-with-invalidate is not applicable" \
  "! grep '^N/A' '$LOG/conformance.log' | grep -v '^N/A send_with_invalidate_revokes_the_rkey:'"
echo "verbs conformance on rdma-sys over rxe0: all checks passed"
