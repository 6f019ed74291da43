package registry

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/registry/hot/inproc"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/store/postgres"
	"github.com/converge-dev/converge/services/registry/store/sqlite"
)

// Module is the Registry as converge's binaries serve it: converge-registry on Postgres (agents,
// ownership, fencing epochs) and Redis (locks, heartbeats); converge dev on SQLite with the hot
// state in process.
func Module() servicecmd.Module {
	var staleAfter, goneAfter time.Duration
	return servicecmd.Module{
		Name:        "registry",
		Short:       "converge Registry service: file locks, ownership and agent heartbeats",
		Listen:      "127.0.0.1:7072",
		Needs:       servicecmd.NeedsPostgres | servicecmd.NeedsRedis,
		DurationEnv: map[string]string{"stale-after": "CONVERGE_STALE_AFTER", "gone-after": "CONVERGE_GONE_AFTER"},
		Bind: func(fs *pflag.FlagSet) {
			fs.DurationVar(&staleAfter, "stale-after", DefaultStaleWindow,
				"an unfinished agent silent this long is answered STALE [CONVERGE_STALE_AFTER]")
			fs.DurationVar(&goneAfter, "gone-after", 0,
				"an unfinished agent silent this long is answered GONE and left out of ListAgents; 0: 10 × --stale-after [CONVERGE_GONE_AFTER]")
		},
		Check: func() error { return CheckWindows(staleAfter, goneAfter) },
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			if rt.Embedded != nil {
				st, err := sqlite.New(ctx, rt.Embedded.SQLite, database.WithLogger(rt.Logger), database.WithMigrate())
				if err != nil {
					return servicecmd.Built{}, err
				}
				// Locks and heartbeats in process; agents, ownership and fencing epochs in SQLite.
				hb := inproc.New(st, "inproc")
				return built(st, nil, New(st, hb, WithLogger(rt.Logger), WithAgentWindows(staleAfter, goneAfter)),
					func() { _ = hb.Close(); _ = st.Close() }), nil
			}
			st, err := postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
			if err != nil {
				return servicecmd.Built{}, err
			}
			redisOpts, err := redis.ParseURL(rt.Flags.RedisURL)
			if err != nil {
				_ = st.Close()
				return servicecmd.Built{}, fmt.Errorf("--redis-url: %w", err)
			}
			rdb := redis.NewClient(redisOpts)
			// Locks and heartbeats live in Redis; their fencing epochs in Postgres. The service is
			// ready when both answer.
			hb := redishot.New(rdb, redishot.DefaultPrefix, st)
			pingRedis := func(ctx context.Context) error {
				if err := rdb.Ping(ctx).Err(); err != nil {
					return fmt.Errorf("redis at %s: %w", redisOpts.Addr, err)
				}
				return nil
			}
			return built(st, pingRedis, New(st, hb, WithLogger(rt.Logger), WithAgentWindows(staleAfter, goneAfter)),
				func() { _ = hb.Close(); _ = rdb.Close(); _ = st.Close() }), nil
		},
	}
}

// built is the served Registry reg on st (readyAlso: the hot state's own readiness, if any).
func built(st servicecmd.Store, readyAlso func(context.Context) error, reg *Server, closeAll func()) servicecmd.Built {
	return servicecmd.Built{
		Desc:      &server.Service{Desc: &registryv1.RegistryService_ServiceDesc, Impl: reg},
		Store:     st,
		ReadyAlso: readyAlso,
		Start:     reg.Start,
		Close:     closeAll,
	}
}

// CheckWindows checks the stale and gone windows of the flags.
func CheckWindows(stale, gone time.Duration) error {
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
