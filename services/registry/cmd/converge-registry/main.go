// Command converge-registry runs the converge Registry service on its own: file locks, ownership and agent heartbeats.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/store/postgres"
)

func main() { servicecmd.Main(module()) }

func command() *cobra.Command { return module().Command() }

func module() servicecmd.Module {
	var staleAfter, goneAfter time.Duration
	return servicecmd.Module{
		Name:        "registry",
		Short:       "converge Registry service: file locks, ownership and agent heartbeats",
		Listen:      "127.0.0.1:7072",
		Needs:       servicecmd.NeedsPostgres | servicecmd.NeedsRedis,
		DurationEnv: map[string]string{"stale-after": "CONVERGE_STALE_AFTER", "gone-after": "CONVERGE_GONE_AFTER"},
		Bind: func(fs *pflag.FlagSet) {
			fs.DurationVar(&staleAfter, "stale-after", registry.DefaultStaleWindow,
				"an unfinished agent silent this long is answered STALE [CONVERGE_STALE_AFTER]")
			fs.DurationVar(&goneAfter, "gone-after", 0,
				"an unfinished agent silent this long is answered GONE and left out of ListAgents; 0: 10 × --stale-after [CONVERGE_GONE_AFTER]")
		},
		Check: func() error { return windows(staleAfter, goneAfter) },
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			st, err := postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
			if err != nil {
				return servicecmd.Built{}, err
			}
			// Redis holds the hot state (locks, heartbeats); the service is ready when both answer.
			redisOpts, err := redis.ParseURL(rt.Flags.RedisURL)
			if err != nil {
				_ = st.Close()
				return servicecmd.Built{}, fmt.Errorf("--redis-url: %w", err)
			}
			rdb := redis.NewClient(redisOpts)
			// Locks and heartbeats live in Redis; their fencing epochs in Postgres.
			hot := redishot.New(rdb, redishot.DefaultPrefix, st)
			reg := registry.New(st, hot, registry.WithLogger(rt.Logger), registry.WithAgentWindows(staleAfter, goneAfter))
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &registryv1.RegistryService_ServiceDesc, Impl: reg},
				Store: st,
				ReadyAlso: func(ctx context.Context) error {
					if err := rdb.Ping(ctx).Err(); err != nil {
						return fmt.Errorf("redis at %s: %w", redisOpts.Addr, err)
					}
					return nil
				},
				Start: reg.Start,
				Close: func() {
					_ = hot.Close()
					_ = rdb.Close()
					_ = st.Close()
				},
			}, nil
		},
	}
}

// windows checks the stale and gone windows.
func windows(stale, gone time.Duration) error {
	switch {
	case stale <= 0:
		return fmt.Errorf("--stale-after must be positive, not %s", stale)
	case gone < 0:
		return fmt.Errorf("--gone-after must be 0 (10 × --stale-after) or positive, not %s", gone)
	case gone > 0 && gone < stale:
		return fmt.Errorf("--gone-after (%s) must not be shorter than --stale-after (%s)", gone, stale)
	}
	return nil
}
