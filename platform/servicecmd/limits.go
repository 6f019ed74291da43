package servicecmd

import (
	"strconv"
	"time"

	"github.com/spf13/pflag"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/server"
)

// DefaultVerificationsPerPrincipal is how many verifications (Verify, VerifyStream) one principal
// may run at once on a Verifier.
const DefaultVerificationsPerPrincipal = 16

// VerificationsQuota names the Verifier's per-principal quota in ResourceExhausted messages.
const VerificationsQuota = "verifications per principal"

// LimitFlags are the resource limits every server binary (and converge dev) takes: see
// server.Limits for what each does.
type LimitFlags struct {
	// MaxConnections bounds the open connections (at the limit the longest-idle one is closed).
	MaxConnections int
	// MaxConcurrentStreams bounds the calls in flight on one connection.
	MaxConcurrentStreams uint32
	// MaxConnectionIdle closes connections idle that long.
	MaxConnectionIdle time.Duration
	// StreamsPerPrincipal bounds one principal's open streaming calls.
	StreamsPerPrincipal int
	// VerificationsPerPrincipal bounds one principal's verifications in flight (the Verifier).
	VerificationsPerPrincipal int
}

// LimitDurationEnv maps the limit flags that are durations to their variables (DurationFromEnv):
// whatever runs a command with LimitFlags calls DurationFromEnv for each first thing in RunE.
var LimitDurationEnv = map[string]string{"max-connection-idle": "CONVERGE_MAX_CONNECTION_IDLE"}

func (l *LimitFlags) bind(fs *pflag.FlagSet) {
	fs.IntVar(&l.MaxConnections, "max-connections", envInt("CONVERGE_MAX_CONNECTIONS", server.DefaultMaxConnections),
		"most open connections; at the limit a new connection closes the longest-idle one, so health always answers; -1 for none [CONVERGE_MAX_CONNECTIONS]")
	fs.Uint32Var(&l.MaxConcurrentStreams, "max-concurrent-streams", uint32(envInt("CONVERGE_MAX_CONCURRENT_STREAMS", server.DefaultMaxConcurrentStreams)),
		"most calls in flight on one connection [CONVERGE_MAX_CONCURRENT_STREAMS]")
	fs.DurationVar(&l.MaxConnectionIdle, "max-connection-idle", server.DefaultMaxConnectionIdle,
		"close connections that carried no call for this long; -1s for never [CONVERGE_MAX_CONNECTION_IDLE]")
	fs.IntVar(&l.StreamsPerPrincipal, "max-streams-per-principal", envInt("CONVERGE_MAX_STREAMS_PER_PRINCIPAL", server.DefaultStreamsPerPrincipal),
		"most streaming calls (WatchExecution, VerifyStream, RunTask) one principal holds open; more are ResourceExhausted; -1 for none [CONVERGE_MAX_STREAMS_PER_PRINCIPAL]")
	fs.IntVar(&l.VerificationsPerPrincipal, "max-verifications-per-principal", envInt("CONVERGE_MAX_VERIFICATIONS_PER_PRINCIPAL", DefaultVerificationsPerPrincipal),
		"Verifier: most Verify/VerifyStream calls one principal runs at once; more are ResourceExhausted; -1 for none [CONVERGE_MAX_VERIFICATIONS_PER_PRINCIPAL]")
}

// Limits answers the server limits the flags describe.
func (l *LimitFlags) Limits() server.Limits {
	return server.Limits{
		MaxConnections:       l.MaxConnections,
		MaxConcurrentStreams: l.MaxConcurrentStreams,
		MaxConnectionIdle:    l.MaxConnectionIdle,
		StreamsPerPrincipal:  l.StreamsPerPrincipal,
		Quotas: []server.Quota{{
			Name:         VerificationsQuota,
			Methods:      []string{verifierv1.VerifierService_Verify_FullMethodName, verifierv1.VerifierService_VerifyStream_FullMethodName},
			PerPrincipal: l.VerificationsPerPrincipal,
		}},
	}
}

// envInt reads an integer variable; unset or not a number gives def (the flag's parse then
// reports a bad command-line value; a bad variable is named by the startup log's limits).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(env(name, "")); err == nil {
		return v
	}
	return def
}
