// Package clustertest runs converge the way it is deployed, on this machine: the real binaries
// (converge and converge-<service>), built once per process, each service its own process on a
// Postgres database and a Redis of its own, N Scheduler replicas and M agent processes, with
// their logs kept, faults on demand (kill -9, SIGSTOP/SIGCONT, restart, a TCP fault proxy on a
// link) and everything torn down at the end (SIGTERM, then SIGKILL after a grace period).
//
// It is the one process harness of the repository: cmd/converge's end-to-end and cluster tests,
// the fault suite (faults/), bench/dag and bench/load use it. It is a plain package, not a test
// package, so that benchmark commands use it too: everything takes a [TB], which *testing.T
// satisfies and [Run] gives a command.
//
//	c := clustertest.Start(t, clustertest.Options{Schedulers: 2, Agents: 3})
//	res, err := c.SchedulerClient(0).CreateTaskList(ctx, req)
//	c.Agent("agent-01").Kill()           // kill -9
//	c.RestartScheduler(1)
//
// Postgres and Redis are either the ones given ([UsePostgres], [UseRedis]; by default the test
// servers of CONVERGE_TEST_POSTGRES_URL and CONVERGE_TEST_REDIS_URL), on which every cluster gets
// a fresh database dropped at the end, or private servers started for the caller
// ([StartPostgres]: initdb and pg_ctl into a temporary directory; [StartRedis]: redis-server on a
// free port) that a fault may stop and restart.
//
// Binaries come from $CONVERGE_TEST_BIN when set (a directory of prebuilt converge and
// converge-<service>), else they are built from this repository's go.work into a temporary
// directory the first time one is asked for; [RemoveBinaries] removes it (call it from TestMain
// or at the end of a command).
package clustertest
