// Command converge-registry runs the converge Registry service on its own: file locks, ownership and agent heartbeats.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	registryv1 "github.com/converge-dev/converge/gen/converge/registry/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/registry"
	"github.com/converge-dev/converge/services/registry/hot/redishot"
	"github.com/converge-dev/converge/services/registry/store/postgres"
)

func main() { os.Exit(servicecmd.Execute(command())) }

func command() *cobra.Command {
	var (
		flags      servicecmd.Flags
		staleAfter time.Duration
		goneAfter  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "converge-registry",
		Short: "converge Registry service: file locks, ownership and agent heartbeats",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := errors.Join(servicecmd.DurationFromEnv(cmd, "stale-after", "CONVERGE_STALE_AFTER"),
				servicecmd.DurationFromEnv(cmd, "gone-after", "CONVERGE_GONE_AFTER")); err != nil {
				return err
			}
			if err := windows(staleAfter, goneAfter); err != nil {
				return err
			}
			ctx, stop := server.SignalContext(cmd.Context())
			defer stop()
			logger, err := flags.Logger(os.Stderr)
			if err != nil {
				return err
			}
			st, err := postgres.New(ctx, flags.PostgresURL, database.WithLogger(logger))
			if err != nil {
				return err
			}
			defer st.Close()
			// Redis holds the hot state (locks, heartbeats); the service is ready when both answer.
			redisOpts, err := redis.ParseURL(flags.RedisURL)
			if err != nil {
				return fmt.Errorf("--redis-url: %w", err)
			}
			rdb := redis.NewClient(redisOpts)
			defer rdb.Close()
			// Locks and heartbeats live in Redis; their fencing epochs in Postgres.
			hot := redishot.New(rdb, redishot.DefaultPrefix, st)
			defer hot.Close()
			pingRedis := func(ctx context.Context) error {
				if err := rdb.Ping(ctx).Err(); err != nil {
					return fmt.Errorf("redis at %s: %w", redisOpts.Addr, err)
				}
				return nil
			}
			reg := registry.New(st, hot, registry.WithLogger(logger), registry.WithAgentWindows(staleAfter, goneAfter))
			return flags.Serve(ctx, "registry", logger, server.Service{
				Desc: &registryv1.RegistryService_ServiceDesc,
				Impl: reg,
				Ready: servicecmd.AllReady(servicecmd.ReadyProbe(st, flags.Migrate, func() { reg.Start(ctx) }),
					pingRedis),
			})
		},
	}
	flags.Bind(cmd, "127.0.0.1:7072", servicecmd.NeedsPostgres|servicecmd.NeedsRedis)
	cmd.Flags().DurationVar(&staleAfter, "stale-after", registry.DefaultStaleWindow,
		"an unfinished agent silent this long is answered STALE [CONVERGE_STALE_AFTER]")
	cmd.Flags().DurationVar(&goneAfter, "gone-after", 0,
		"an unfinished agent silent this long is answered GONE and left out of ListAgents; 0: 10 × --stale-after [CONVERGE_GONE_AFTER]")
	return cmd
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
