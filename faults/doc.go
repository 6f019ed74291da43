// Package faults is converge's fault suite: the real service binaries (Registry, Knowledge,
// Verifier, two Scheduler replicas, several agents) on a private Postgres and a private Redis,
// all on loopback, one fault scenario at a time — agents killed -9, a Scheduler replica killed
// and restarted, Redis flushed and restarted, Postgres restarted, latency, resets and cuts
// through a TCP fault proxy, an agent stopped past its lease — and the failure paths with
// production-like timing (failure_paths_test.go): an agent killed -9 right after a claim, an
// agent restarted under the same instance id, a task that always fails, a Verifier that refuses.
//
// The deployment, the private Postgres and Redis and the TCP fault proxies are
// platform/clustertest's, the process harness every test and benchmark that starts the binaries
// shares.
//
// Its tests run only when CONVERGE_FAULTS is "full" or "ci" (faults/run.sh, `make faults`,
// `make faults-ci`); `go test` without it skips them.
package faults
